package docs

import (
	"net"
	"net/http"
	"slices"
	"sync"
)

// ChartRepoURL is the Helm repository the docs' install adds, a placeholder:
// test/docs and the e2e serve a release's repository and put its URL in its
// place.
const ChartRepoURL = "https://charts.example.com/ssdcache"

// Repository serves a directory as a Helm chart repository (index.yaml and
// the charts it lists) over plain HTTP, and keeps the paths it served, so a
// test can tell that helm fetched the chart from it.
type Repository struct {
	URL    string
	server *http.Server
	mu     sync.Mutex
	served []string
}

// ServeRepository serves dir on l until Close.
func ServeRepository(l net.Listener, dir string) *Repository {
	r := &Repository{URL: "http://" + l.Addr().String()}
	files := http.FileServer(http.Dir(dir))
	r.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		files.ServeHTTP(rec, req)
		if rec.status == http.StatusOK {
			r.mu.Lock()
			r.served = append(r.served, req.URL.Path)
			r.mu.Unlock()
		}
	})}
	go r.server.Serve(l)
	return r
}

// Served says whether path (/index.yaml) was served whole at least once.
func (r *Repository) Served(path string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.served, path)
}

// Paths are the paths served so far, in order.
func (r *Repository) Paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.served)
}

// Close stops the server and closes its listener.
func (r *Repository) Close() error { return r.server.Close() }

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(status int) {
	s.status = status
	s.ResponseWriter.WriteHeader(status)
}
