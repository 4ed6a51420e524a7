package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// metrics: the node's metrics Service (through the apiserver's service
// proxy, as a Prometheus inside the cluster would reach it) serves
// per-volume cache counters for the cached volume.
func (s *suite) metrics(ctx context.Context, t *testing.T) {
	handle := s.volumeHandle(ctx, t, "cached-data")
	path := "/api/v1/namespaces/" + namespace + "/services/" + release + "-node-metrics:metrics/proxy/metrics"
	var body string
	eventually(ctx, t, time.Minute, "per-volume cache series", func() (bool, string) {
		out, err := s.c.Kubectl(ctx, "get", "--raw", path)
		body = out
		return err == nil && strings.Contains(out, `ssdcache_cache_read_hits_total{volume="`+handle+`"}`), errOrEmpty(err)
	})
	for _, series := range []string{"ssdcache_cache_read_misses_total", "ssdcache_cache_used_blocks", "ssdcache_volume_read_bytes_total"} {
		if !strings.Contains(body, series+`{volume="`+handle+`"}`) {
			t.Errorf("metrics lack %s for volume %s", series, handle)
		}
	}
	if !strings.Contains(body, "ssdcache_cache_pool_up 1") {
		t.Errorf("metrics do not report the cache pool up")
	}
}

// uninstall: workloads and PVCs deleted, then `helm uninstall`; the node is
// left with its two volume groups and no LV or dm device of ssdcache.
func (s *suite) uninstall(ctx context.Context, t *testing.T) {
	s.kubectl(ctx, t, "-n", "default", "delete", "pod", "cached-data", reader, "--timeout=2m")
	s.kubectl(ctx, t, "-n", "default", "delete", "pvc", "cached-data", reader, "--timeout=3m")
	// The bench PVC belongs to the release; its volume must go while the
	// provisioner (a sidecar of the node plugin) still runs.
	if _, err := s.c.Helm(ctx, "upgrade", release, filepath.Join(s.repo, "charts", "ssdcache"), "--namespace", namespace,
		"--reuse-values", "--set", "bench.enabled=false"); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, 3*time.Minute, "every PV deleted", func() (bool, string) {
		out, err := s.c.Kubectl(ctx, "get", "pv", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out
	})
	if _, err := s.c.Helm(ctx, "uninstall", release, "--namespace", namespace, "--wait", "--timeout", "3m"); err != nil {
		t.Fatal(err)
	}
	out := s.node(ctx, t, "dmsetup ls; echo ---; lvs --noheadings -o vg_name,lv_name 2>/dev/null; echo ---; vgs --noheadings -o vg_name")
	parts := strings.Split(out, "---")
	if len(parts) != 3 {
		t.Fatalf("node output: %s", out)
	}
	if strings.Contains(parts[0], "ssdcache") {
		t.Errorf("dm devices left after uninstall:\n%s", parts[0])
	}
	if strings.TrimSpace(parts[1]) != "" {
		t.Errorf("LVs left after uninstall:\n%s", parts[1])
	}
	t.Logf("volume groups left (the pools): %s", strings.Join(strings.Fields(parts[2]), " "))
}
