package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

const (
	cachedClass = release + "-cached" // the chart's StorageClass
	cacheSize   = "64Mi"
	volumeSize  = "512Mi"
	// The bench Job's name ends in a hash of its pod template (the chart's
	// bench-job.yaml); the e2e finds it by its labels.
	benchJobSelector     = "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component=bench"
	benchReportConfigMap = release + "-bench-report"
)

// chartValues are the e2e's own settings beside the README's install: the
// images built here and pulled from nowhere, the cache size of the chart's
// class, and faster sampling to keep the test short. The disks come from the
// README's selectors.
func (s *suite) chartValues() map[string]any {
	never := func(n imageName) map[string]any {
		return map[string]any{"image": map[string]any{"repository": n.Repository, "tag": n.Tag, "pullPolicy": "Never"}}
	}
	_, tag, _ := strings.Cut(s.images.project, ":")
	return map[string]any{
		// The tag too: later steps upgrade with the chart's directory.
		"image": map[string]any{"tag": tag, "pullPolicy": "Never"},
		"node":  map[string]any{"sampleInterval": "2s", "extraArgs": []string{"--status-interval=5s"}},
		"sidecars": map[string]any{
			"nodeDriverRegistrar": never(s.images.registrar),
			"provisioner":         never(s.images.provisioner),
		},
		"storageClass": map[string]any{"cacheSize": cacheSize},
	}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitInstalled waits for both rollouts and for kubelet to register the plugin.
func (s *suite) waitInstalled(ctx context.Context, t *testing.T) {
	// helm does not wait for a one-node DaemonSet; rollout status does.
	s.waitRollout(ctx, t, object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector})
	s.waitRollout(ctx, t, object{ns: namespace, name: "deployment/" + release + "-controller", pods: "app.kubernetes.io/component=controller"})
	// kubelet registered the plugin through node-driver-registrar.
	s.eventually(ctx, t, "CSINode lists ssdcache.io", object{name: "csinode/e2e-node"}, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "get", "csinode", "e2e-node", "-o", "jsonpath={.spec.drivers[*].name}")
		return err == nil && strings.Contains(out, "ssdcache.io"), "drivers: " + out + errOrEmpty(err), nil
	})
}

// cachedStorageClass: a PVC of the chart's readcache class and a pod writing
// a checksummed data set; once its binding is Ready the volume is a
// writethrough dm-cache on the node.
func (s *suite) cachedStorageClass(ctx context.Context, t *testing.T) {
	s.apply(ctx, t, pvcAndPod("cached-data", cachedClass, volumeSize, s.images.project, writeDataSet+"sleep infinity"))
	s.waitReady(ctx, t, object{ns: "default", name: "pod/cached-data"})
	// The controller made a binding for the PVC of the caching class; NodeStage
	// brought the volume up linear and the node agent attached the binding's cache.
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/cached-data"})
	handle := s.volumeHandle(ctx, t, "cached-data")
	s.waitTable(ctx, t, handle, cachedTable, "a writethrough cache table on the cached volume")
	t.Logf("dm table: %s", s.dmTable(ctx, t, handle))
	s.logStageToCacheLive(ctx, t, handle)
}

// benchJob: the chart's bench Job on its own PVC of the cached class, tiny
// but complete; its ConfigMap holds a report with every pass.
func (s *suite) benchJob(ctx context.Context, t *testing.T) {
	const runs = 2
	if _, err := s.c.Helm(ctx, "upgrade", release, filepath.Join(s.repo, "charts", "ssdcache"), "--namespace", namespace,
		"--reuse-values", "--set", "bench.enabled=true,bench.volumeSize=512Mi,bench.cacheSize="+cacheSize+
			",bench.workingSets={50%},bench.runs="+strconv.Itoa(runs)+",bench.interval=2s,bench.testInterval=1s,bench.tests=read"); err != nil {
		t.Fatal(err)
	}
	jobs := strings.Fields(s.kubectl(ctx, t, "-n", namespace, "get", "jobs", "-l", benchJobSelector, "-o", "jsonpath={.items[*].metadata.name}"))
	if len(jobs) != 1 {
		t.Fatalf("bench Jobs %q (labels %s), want one", jobs, benchJobSelector)
	}
	job := object{ns: namespace, name: "job/" + jobs[0], pods: "job-name=" + jobs[0]}
	s.eventually(ctx, t, "bench Job complete", job, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", namespace, "get", job.name, "-o",
			`jsonpath=active={.status.active} failed={.status.failed} conditions={.status.conditions[?(@.status=="True")].type}`)
		_, conditions, _ := strings.Cut(out, "conditions=")
		if strings.Contains(conditions, "Failed") {
			logs, err := s.c.Kubectl(ctx, "-n", namespace, "logs", job.name, "--tail=30")
			return false, out, fmt.Errorf("the Job failed (%s): %s%s", out, logs, errOrEmpty(err))
		}
		return err == nil && strings.Contains(conditions, "Complete"), out + errOrEmpty(err), nil
	})
	var cm struct{ Data map[string]string }
	if err := json.Unmarshal([]byte(s.kubectl(ctx, t, "-n", namespace, "get", "configmap", benchReportConfigMap, "-o", "json")), &cm); err != nil {
		t.Fatalf("ConfigMap %s: %v", benchReportConfigMap, err)
	}
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
	// The pod reads its volume's dm device and the disks beneath it from
	// the node's sysfs: once the cache is attached, the device, the HDD and
	// the SSD.
	if !slices.ContainsFunc(report.Results, func(r bench.Result) bool { return len(r.Disks) >= 3 }) {
		t.Errorf("no result has disk figures of the volume's device and the two disks under it; disks seen: %+v", report.Disks)
	}
	if !strings.Contains(cm.Data["report.md"], "MB/s") {
		t.Errorf("report.md in the ConfigMap has no MB/s table:\n%s", cm.Data["report.md"])
	}
	t.Logf("bench report.md:\n%s", cm.Data["report.md"])
}
