package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// serveHealthz serves /healthz on lis until ctx ends.
func serveHealthz(ctx context.Context, lis net.Listener, health *healthChecker) error {
	mux := http.NewServeMux()
	mux.Handle("/healthz", health)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	klog.InfoS("Serving /healthz", "address", lis.Addr().String())
	// Close, not a graceful Shutdown: upstream simply exits on SIGTERM.
	return serveUntilDone(ctx, "/healthz server on "+lis.Addr().String(), func() error { return srv.Serve(lis) }, func() { _ = srv.Close() })
}

// healthChecker serves /healthz: the registration socket must exist and
// answer GetInfo with this driver's name, as upstream checks.
type healthChecker struct {
	socketPath string
	driverName string
	timeout    time.Duration
}

func (h *healthChecker) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	code, body := h.check(req.Context())
	if code == http.StatusOK {
		klog.V(5).InfoS("Health check succeeded")
	} else {
		klog.ErrorS(nil, "Health check failed", "status", code, "reason", body)
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// check returns upstream's answers: 404 without the socket, 500 when it is
// not a socket or does not answer GetInfo for this driver.
func (h *healthChecker) check(ctx context.Context) (code int, body string) {
	exists, err := socketExists(h.socketPath)
	switch {
	case err != nil:
		return http.StatusInternalServerError, err.Error()
	case !exists:
		return http.StatusNotFound, "registration socket does not exist"
	}
	if err := h.checkLiveSocket(ctx); err != nil {
		return http.StatusInternalServerError, err.Error()
	}
	return http.StatusOK, "ok"
}

// checkLiveSocket calls GetInfo on the registration socket, as kubelet would.
func (h *healthChecker) checkLiveSocket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	conn, err := connection.Connect(ctx, h.socketPath, nil)
	if err != nil {
		return fmt.Errorf("error connecting to node-registrar socket %s: %w", h.socketPath, err)
	}
	defer func() { _ = conn.Close() }()

	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("error getting info from node-registrar socket: %w", err)
	}
	if info.Name != h.driverName {
		return fmt.Errorf("registration socket %s answers for driver %q, want %q", h.socketPath, info.Name, h.driverName)
	}
	return nil
}
