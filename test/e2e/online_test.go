package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const reader = "plain-data" // PVC and pod of the uncached class

var passLine = regexp.MustCompile(`(?m)^pass (\d+) ok$`)

// readerPasses is the reader's last completed verification pass; it fails
// the test as soon as the reader saw a wrong byte or an I/O error.
func (s *suite) readerPasses(ctx context.Context, t *testing.T) int {
	t.Helper()
	logs := s.kubectl(ctx, t, "-n", "default", "logs", "pod/"+reader)
	if strings.Contains(logs, "FAIL") {
		t.Fatalf("the reader saw bad data or an I/O error:\n%s", logs)
	}
	if phase := s.jsonpath(ctx, t, "pod/"+reader, "{.status.phase}", "-n", "default"); phase != "Running" {
		t.Fatalf("reader pod is %s, want Running:\n%s", phase, logs)
	}
	m := passLine.FindAllStringSubmatch(logs, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// waitMorePasses waits until the reader completed more passes than after.
func (s *suite) waitMorePasses(ctx context.Context, t *testing.T, after int, what string) int {
	t.Helper()
	var n int
	eventually(ctx, t, 3*time.Minute, "reader passes "+what, func() (bool, string) {
		n = s.readerPasses(ctx, t)
		return n > after, "at pass " + strconv.Itoa(n)
	})
	return n
}

// cacheBindingOnline: a volume of an uncached class is read in a loop while
// `kubectl apply` of a CacheBinding attaches a cache and deleting the
// binding detaches it; the reader never sees an error and the data verify.
func (s *suite) cacheBindingOnline(ctx context.Context, t *testing.T) {
	s.apply(ctx, t, storageClassUncached)
	s.apply(ctx, t, pvcAndPod(reader, "e2e-uncached", volumeSize, s.images.project, writeDataSet+verifyLoop))
	s.kubectl(ctx, t, "-n", "default", "wait", "--for=condition=Ready", "pod/"+reader, "--timeout=5m")
	handle := s.volumeHandle(ctx, t, reader)
	if table := s.dmTable(ctx, t, handle); !strings.Contains(table, " linear ") {
		t.Fatalf("uncached volume's table is not linear: %s", table)
	}
	passes := s.waitMorePasses(ctx, t, 0, "before the binding")

	s.apply(ctx, t, cacheBinding(reader, cacheSize))
	s.kubectl(ctx, t, "-n", "default", "wait", "--for=condition=Ready", "cachebinding/"+reader, "--timeout=3m")
	if table := s.dmTable(ctx, t, handle); !strings.Contains(table, " cache ") || !strings.Contains(table, " writethrough ") {
		t.Fatalf("after the binding went Ready the table is not a writethrough cache: %s", table)
	}
	first := s.readHits(ctx, t)
	eventually(ctx, t, 4*time.Minute, "the binding's read hits rise", func() (bool, string) {
		hits := s.readHits(ctx, t)
		return hits > first && hits > 0, "readHits " + strconv.FormatInt(hits, 10)
	})
	t.Logf("binding status: %s", s.jsonpath(ctx, t, "cachebinding/"+reader, "{.status.cache}", "-n", "default"))
	passes = s.waitMorePasses(ctx, t, passes, "with the cache attached")

	s.kubectl(ctx, t, "-n", "default", "delete", "cachebinding/"+reader, "--timeout=3m")
	if table := s.dmTable(ctx, t, handle); !strings.Contains(table, " linear ") {
		t.Fatalf("after the binding was deleted the table is not linear: %s", table)
	}
	s.waitMorePasses(ctx, t, passes, "after the detach")
	// The node agent told the user, through Events on the binding.
	eventually(ctx, t, time.Minute, "CacheAttached and CacheDetached events", func() (bool, string) {
		reasons := s.jsonpath(ctx, t, "events", "{.items[*].reason}", "-n", "default", "--field-selector", "involvedObject.name="+reader)
		return strings.Contains(reasons, "CacheAttached") && strings.Contains(reasons, "CacheDetached"), reasons
	})
	// One last check of every byte, through the page cache-free path the loop uses.
	s.kubectl(ctx, t, "-n", "default", "exec", reader, "--", "bash", "-c", "cd /data && sha256sum -c --quiet SUMS")
}

// readHits is the binding's status.cache.readHits (0 before the first figures).
func (s *suite) readHits(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	v := s.jsonpath(ctx, t, "cachebinding/"+reader, "{.status.cache.readHits}", "-n", "default")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// nodePluginRestart: the node plugin's pod is deleted while both volumes
// are staged; the DaemonSet's new pod takes over and the volumes keep
// serving reads and writes.
func (s *suite) nodePluginRestart(ctx context.Context, t *testing.T) {
	old := s.nodePluginPod(ctx, t)
	passes := s.readerPasses(ctx, t)
	s.kubectl(ctx, t, "-n", namespace, "delete", "pod", old, "--wait=true", "--timeout=2m")
	eventually(ctx, t, 5*time.Minute, "a new node plugin pod is Ready", func() (bool, string) {
		out, err := s.c.Kubectl(ctx, "-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=node", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		return err == nil && !strings.Contains(out, old) && strings.Contains(out, "=True"), out
	})
	s.waitMorePasses(ctx, t, passes, "after the plugin restart")
	s.kubectl(ctx, t, "-n", "default", "exec", "cached-data", "--", "bash", "-c",
		"head -c 4M /dev/urandom > /data/after-restart && sync && cd /data && sha256sum -c --quiet SUMS")
	cached := s.dmTable(ctx, t, s.volumeHandle(ctx, t, "cached-data"))
	if !strings.Contains(cached, " writethrough ") {
		t.Fatalf("the cached volume lost its cache across the restart: %s", cached)
	}
	s.kubectl(ctx, t, "-n", "default", "wait", "--for=condition=Ready", "cachebinding/cached-data", "--timeout=2m")
}

func (s *suite) nodePluginPod(ctx context.Context, t *testing.T) string {
	t.Helper()
	name := s.jsonpath(ctx, t, "pods", "{.items[0].metadata.name}", "-n", namespace, "-l", "app.kubernetes.io/component=node")
	if name == "" {
		t.Fatal("no node plugin pod")
	}
	return name
}
