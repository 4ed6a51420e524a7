package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const reader = "plain-data" // PVC and pod of the uncached class

var readerPod = object{ns: "default", name: "pod/" + reader}

var passLine = regexp.MustCompile(`(?m)^pass (\d+) ok$`)

// readerPasses is the reader's last completed verification pass; it fails
// the test as soon as the reader saw a wrong byte or an I/O error, or stopped.
func (s *suite) readerPasses(ctx context.Context, t *testing.T) int {
	t.Helper()
	n, saw, err := s.readerState(ctx)
	if err == nil && n < 0 {
		err = errors.New(saw)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, s.explain(ctx, readerPod))
	}
	return n
}

// readerState is the reader's last completed pass (-1 when kubectl could
// not tell) and what was seen, with an error when the reader can make no
// more passes: it saw a wrong byte or an I/O error, or its pod stopped.
func (s *suite) readerState(ctx context.Context) (int, string, error) {
	logs, err := s.c.Kubectl(ctx, "-n", "default", "logs", readerPod.name)
	if err != nil {
		return -1, err.Error(), nil
	}
	if strings.Contains(logs, "FAIL") {
		return -1, "", fmt.Errorf("the reader saw bad data or an I/O error:\n%s", logs)
	}
	phase, err := s.c.Kubectl(ctx, "-n", "default", "get", readerPod.name, "-o", "jsonpath={.status.phase}")
	if err != nil {
		return -1, err.Error(), nil
	}
	if phase != "Running" {
		return -1, "", fmt.Errorf("reader pod is %s, want Running:\n%s", phase, logs)
	}
	m := passLine.FindAllStringSubmatch(logs, -1)
	if len(m) == 0 {
		return 0, "no pass completed yet", nil
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n, "at pass " + strconv.Itoa(n), nil
}

// waitMorePasses waits until the reader completed more passes than after.
func (s *suite) waitMorePasses(ctx context.Context, t *testing.T, after int, what string) int {
	t.Helper()
	var n int
	s.eventually(ctx, t, "reader passes "+what, readerPod, func() (bool, string, error) {
		var saw string
		var err error
		n, saw, err = s.readerState(ctx)
		return n > after, fmt.Sprintf("%s (waiting for more than %d)", saw, after), err
	})
	return n
}

// cacheBindingOnline: a volume of an uncached class is read in a loop while
// `kubectl apply` of a CacheBinding attaches a cache and deleting the
// binding detaches it; the reader never sees an error and the data verify.
func (s *suite) cacheBindingOnline(ctx context.Context, t *testing.T) {
	s.apply(ctx, t, storageClassUncached)
	s.apply(ctx, t, pvcAndPod(reader, "e2e-uncached", volumeSize, s.images.project, writeDataSet+verifyLoop))
	s.waitReady(ctx, t, readerPod)
	handle := s.volumeHandle(ctx, t, reader)
	if table := s.dmTable(ctx, t, handle); !strings.Contains(table, " linear ") {
		t.Fatalf("uncached volume's table is not linear: %s", table)
	}
	passes := s.waitMorePasses(ctx, t, 0, "before the binding")

	s.apply(ctx, t, cacheBinding(reader, cacheSize, "f1", "no-such-file"))
	binding := object{ns: "default", name: "cachebinding/" + reader}
	s.waitReady(ctx, t, binding)
	s.waitTable(ctx, t, handle, cachedTable, "a writethrough cache table once the binding is Ready")
	s.expectPreloaded(ctx, t, binding)
	first, _ := s.readHits(ctx)
	s.eventually(ctx, t, "the binding's read hits rise", binding, func() (bool, string, error) {
		hits, saw := s.readHits(ctx)
		return hits > first && hits > 0, fmt.Sprintf("%s, at first %d", saw, first), nil
	})
	t.Logf("binding status: %s", s.jsonpath(ctx, t, "cachebinding/"+reader, "{.status.cache}", "-n", "default"))
	passes = s.waitMorePasses(ctx, t, passes, "with the cache attached")

	s.deleteAndWait(ctx, t, "default", binding.name)
	if table := s.dmTable(ctx, t, handle); !strings.Contains(table, " linear ") {
		t.Fatalf("after the binding was deleted the table is not linear: %s", table)
	}
	s.waitMorePasses(ctx, t, passes, "after the detach")
	// The node agent told the user, through Events on the binding.
	s.eventually(ctx, t, "CacheAttached and CacheDetached events", binding, func() (bool, string, error) {
		reasons, err := s.c.Kubectl(ctx, "-n", "default", "get", "events", "--field-selector", "involvedObject.name="+reader, "-o", "jsonpath={.items[*].reason}")
		return strings.Contains(reasons, "CacheAttached") && strings.Contains(reasons, "CacheDetached"), "reasons: " + reasons + errOrEmpty(err), nil
	})
	// One last check of every byte, through the page cache-free path the loop uses.
	s.exec(ctx, t, reader, "cd /data && sha256sum -c --quiet SUMS")
}

// expectPreloaded waits for the binding's preload of f1 (found in the
// volume's filesystem through the node plugin's own mount namespace, and
// copied into the cache or promoted there already) and no-such-file
// (reported missing).
func (s *suite) expectPreloaded(ctx context.Context, t *testing.T, binding object) {
	t.Helper()
	s.eventually(ctx, t, "status.lastPreload of f1", binding, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", "default", "get", binding.name, "-o", "jsonpath={.status.lastPreload}")
		var p struct {
			Files, FileBytes, Bytes, HeldBytes int64
			MissingPaths                       []string
			Error                              string
		}
		if err != nil || strings.TrimSpace(out) == "" || json.Unmarshal([]byte(out), &p) != nil {
			return false, "lastPreload: " + out + errOrEmpty(err), nil
		}
		if p.Error != "" { // the pod has the filesystem mounted: no failure is transient
			return false, "", fmt.Errorf("preload failed: %s", p.Error)
		}
		ok := p.Files == 1 && p.FileBytes == dataFileMB<<20 && p.Bytes+p.HeldBytes >= p.FileBytes && slices.Equal(p.MissingPaths, []string{"no-such-file"})
		return ok, "lastPreload: " + out, nil
	})
	t.Logf("binding lastPreload: %s", s.jsonpath(ctx, t, binding.name, "{.status.lastPreload}", "-n", "default"))
}

// readHits is the binding's status.cache.readHits (0 before the first
// figures, or when kubectl failed) and what was read.
func (s *suite) readHits(ctx context.Context) (int64, string) {
	v, err := s.c.Kubectl(ctx, "-n", "default", "get", "cachebinding/"+reader, "-o", "jsonpath={.status.cache.readHits}")
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, fmt.Sprintf("readHits %q%s", v, errOrEmpty(err))
}
