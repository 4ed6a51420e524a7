package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/vm"
)

const (
	cachedClass  = release + "-cached" // the chart's StorageClass
	cacheSize    = "64Mi"
	volumeSize   = "512Mi"
	benchJobName = release + "-bench"
)

// chartValues are what an operator would pass: the pools by /dev/disk/by-id
// path, the images, a cached StorageClass. Faster sampling keeps the test short.
func (s *suite) chartValues() map[string]any {
	never := func(n imageName) map[string]any {
		return map[string]any{"image": map[string]any{"repository": n.Repository, "tag": n.Tag, "pullPolicy": "Never"}}
	}
	repo, tag, _ := strings.Cut(strings.TrimPrefix(s.images.project, "docker.io/"), ":")
	return map[string]any{
		"image": map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"node": map[string]any{
			"originDevices": []string{vm.HDDByID}, "cacheDevices": []string{vm.SSDByID},
			"sampleInterval": "2s", "extraArgs": []string{"--status-interval=5s"},
		},
		"sidecars": map[string]any{
			"nodeDriverRegistrar": never(s.images.registrar),
			"livenessProbe":       never(s.images.liveness),
			"provisioner":         never(s.images.provisioner),
		},
		"storageClass": map[string]any{"create": true, "cacheSize": cacheSize},
	}
}

func (s *suite) helmInstall(ctx context.Context, t *testing.T) {
	raw, err := yaml.Marshal(s.chartValues())
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(s.workDir, "values.yaml")
	if err := os.WriteFile(values, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Helm(ctx, "install", release, filepath.Join(s.repo, "charts", "ssdcache"),
		"--namespace", namespace, "--create-namespace", "--values", values, "--timeout", "5m"); err != nil {
		t.Fatal(err)
	}
	// helm --wait does not wait for a one-node DaemonSet; rollout status does.
	s.kubectl(ctx, t, "-n", namespace, "rollout", "status", "daemonset/"+release+"-node", "--timeout=8m")
	s.kubectl(ctx, t, "-n", namespace, "rollout", "status", "deployment/"+release+"-controller", "--timeout=5m")
	// kubelet registered the plugin through node-driver-registrar.
	eventually(ctx, t, 2*time.Minute, "CSINode lists ssdcache.io", func() (bool, string) {
		out, err := s.c.Kubectl(ctx, "get", "csinode", "e2e-node", "-o", "jsonpath={.spec.drivers[*].name}")
		return err == nil && strings.Contains(out, "ssdcache.io"), out
	})
}

// cachedStorageClass: a PVC of the chart's readcache class and a pod writing
// a checksummed data set; on the node the volume is a writethrough dm-cache.
func (s *suite) cachedStorageClass(ctx context.Context, t *testing.T) {
	s.apply(ctx, t, pvcAndPod("cached-data", cachedClass, volumeSize, s.images.project, writeDataSet+"sleep infinity"))
	s.kubectl(ctx, t, "-n", "default", "wait", "--for=condition=Ready", "pod/cached-data", "--timeout=5m")
	table := s.dmTable(ctx, t, s.volumeHandle(ctx, t, "cached-data"))
	if !strings.Contains(table, " cache ") || !strings.Contains(table, " writethrough ") {
		t.Fatalf("dm table of the cached volume is not a writethrough cache: %s", table)
	}
	t.Logf("dm table: %s", table)
	// The controller made a binding for the PVC of the caching class.
	s.kubectl(ctx, t, "-n", "default", "wait", "--for=condition=Ready", "cachebinding/cached-data", "--timeout=3m")
}

// benchJob: the chart's bench Job on its own PVC of the cached class, tiny
// but complete; its ConfigMap holds a report with every pass.
func (s *suite) benchJob(ctx context.Context, t *testing.T) {
	const runs = 2
	if _, err := s.c.Helm(ctx, "upgrade", release, filepath.Join(s.repo, "charts", "ssdcache"), "--namespace", namespace,
		"--reuse-values", "--set", "bench.enabled=true,bench.volumeSize=512Mi,bench.cacheSize="+cacheSize+
			",bench.workingSets={50%},bench.runs="+strconv.Itoa(runs)+",bench.interval=2s,bench.tests=read"); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, 10*time.Minute, "bench Job complete", func() (bool, string) {
		out, err := s.c.Kubectl(ctx, "-n", namespace, "get", "job/"+benchJobName, "-o",
			`jsonpath={.status.conditions[?(@.status=="True")].type}`)
		if strings.Contains(out, "Failed") {
			t.Fatalf("bench Job failed: %s", s.kubectlOrErr(ctx, "-n", namespace, "logs", "job/"+benchJobName, "--tail=30"))
		}
		return err == nil && strings.Contains(out, "Complete"), out + errOrEmpty(err)
	})
	var cm struct{ Data map[string]string }
	s.getJSON(ctx, t, &cm, "-n", namespace, "configmap", benchJobName+"-report")
	var report bench.Report
	if err := json.Unmarshal([]byte(cm.Data["report.json"]), &report); err != nil {
		t.Fatalf("report.json in the ConfigMap: %v", err)
	}
	if report.SchemaVersion != bench.SchemaVersion || len(report.Results) < runs {
		t.Fatalf("report has schema %d and %d results, want %d and at least %d", report.SchemaVersion, len(report.Results), bench.SchemaVersion, runs)
	}
	for _, r := range report.Results {
		if r.MBps <= 0 {
			t.Errorf("result %s run %d: %v MB/s", r.Test, r.Run, r.MBps)
		}
	}
	if !strings.Contains(cm.Data["report.md"], "MB/s") {
		t.Errorf("report.md in the ConfigMap has no MB/s table:\n%s", cm.Data["report.md"])
	}
	t.Logf("bench report.md:\n%s", cm.Data["report.md"])
}

func (s *suite) kubectlOrErr(ctx context.Context, args ...string) string {
	out, err := s.c.Kubectl(ctx, args...)
	return out + errOrEmpty(err)
}
