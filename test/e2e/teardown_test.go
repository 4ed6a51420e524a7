package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// metrics: the node's metrics Service (through the apiserver's service
// proxy, as a Prometheus inside the cluster would reach it) serves
// per-volume cache counters for the cached volume.
func (s *suite) metrics(ctx context.Context, t *testing.T) {
	handle := s.volumeHandle(ctx, t, "cached-data")
	pv := s.jsonpath(ctx, t, "pvc/cached-data", "{.spec.volumeName}", "-n", "default")
	node := s.jsonpath(ctx, t, "pv/"+pv, "{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}")
	// One series per volume, labelled with its PVC (labels in the exposition's
	// alphabetical order): the provisioner's --extra-create-metadata reached
	// NodeStage, or the agent read the CacheBinding. Every series names the
	// node, which the alerts and the dashboard read.
	labels := `{namespace="default",node="` + node + `",persistentvolumeclaim="cached-data",volume="` + handle + `"}`
	path := "/api/v1/namespaces/" + namespace + "/services/" + release + "-node-metrics:metrics/proxy/metrics"
	var body string
	service := object{ns: namespace, name: "service/" + release + "-node-metrics", pods: nodeSelector}
	s.eventually(ctx, t, "per-volume cache series", service, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "get", "--raw", path)
		body = out
		return err == nil && strings.Contains(out, "ssdcache_cache_read_hits_total"+labels),
			fmt.Sprintf("%d bytes of metrics, %d ssdcache_cache_read_hits_total series%s", len(out), strings.Count(out, "ssdcache_cache_read_hits_total{"), errOrEmpty(err)), nil
	})
	for _, series := range []string{"ssdcache_cache_read_misses_total", "ssdcache_cache_used_blocks", "ssdcache_volume_read_bytes_total"} {
		if !strings.Contains(body, series+labels) {
			t.Errorf("metrics lack %s%s", series, labels)
		}
	}
	// Written in the same call as ssdcache_volume_read_bytes_total, so
	// certain to be there with it (the origin's and cache's depend on the
	// node's /sys and are not required here).
	diskLabels := `{device="volume",` + labels[1:]
	if !strings.Contains(body, "ssdcache_disk_reads_completed_total"+diskLabels) {
		t.Errorf("metrics lack ssdcache_disk_reads_completed_total%s", diskLabels)
	}
	if !strings.Contains(body, `ssdcache_cache_pool_up{node="`+node+`"} 1`) {
		t.Errorf("metrics do not report the cache pool up")
	}
	for _, pool := range []string{"origin", "cache"} {
		if !regexp.MustCompile(`(?m)^ssdcache_pool_size_bytes\{[^}]*pool="` + pool + `"[^}]*\} [1-9]`).MatchString(body) {
			t.Errorf("metrics lack the %s pool's size (ssdcache_pool_size_bytes)", pool)
		}
	}
	// The project image's binaries report test/e2e/images' default version.
	if !regexp.MustCompile(`(?m)^ssdcache_build_info\{[^}]*version="e2e"\} 1$`).MatchString(body) {
		t.Errorf("metrics lack ssdcache_build_info{version=\"e2e\"} 1")
	}
}

// uninstall: the workloads deleted, then the chart README's uninstall as
// written: the bench off and the PVCs deleted while the plugin runs, the
// CacheBindings left (one whose PVC never existed) deleted, `helm
// uninstall`. The node is left with its two volume groups and no LV or dm
// device of ssdcache.
func (s *suite) uninstall(ctx context.Context, t *testing.T) {
	// A binding whose PVC does not exist: still there at uninstall time.
	s.apply(ctx, t, cacheBinding("leftover", cacheSize))
	s.deleteAndWait(ctx, t, "default", "pod/cached-data", "pod/"+reader, "pod/"+revokedVolume, "pod/"+droppedVolume)
	s.runDocs(ctx, t, "charts/ssdcache/README.md", "uninstall-volumes", [][2]string{
		{"kubectl delete pvc data -n app", "kubectl delete pvc -n default cached-data " + reader + " " + revokedVolume + " " + droppedVolume},
	})
	// "Wait until their PersistentVolumes are gone"; the events of PVs,
	// cluster-scoped, are in namespace default.
	s.eventually(ctx, t, "every PV deleted", object{ns: "default"}, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "get", "pv", "-o", "wide")
		return err == nil && strings.TrimSpace(out) == "", out + errOrEmpty(err), nil
	})
	// The plugin's last work was deleting those volumes; after this it goes.
	s.expectPluginHealthy(ctx, t)
	s.pluginInstalled = false
	s.runDocs(ctx, t, "charts/ssdcache/README.md", "uninstall", nil)
	s.eventually(ctx, t, "the release's pods gone", object{ns: namespace}, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", namespace, "get", "pods", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "", out + errOrEmpty(err), nil
	})
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
