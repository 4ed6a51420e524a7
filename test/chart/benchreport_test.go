package chart

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/bench/reportcm"
)

// TestBenchServiceAccountWritesItsReport: as the bench Job's ServiceAccount,
// holding only what the chart grants it, the code the binary runs
// (pkg/bench/reportcm) checks, creates and then replaces the ConfigMap the
// chart names in -report-configmap, and may write no other ConfigMap.
func TestBenchServiceAccountWritesItsReport(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	r := render(t, "testdata/bench-tiny.yaml")
	applyRBAC(t, ctx, c, r)
	spec := r.benchJob(t).Spec.Template.Spec
	name, ok := argWithPrefix(container(t, spec, "bench"), "-report-configmap=")
	if !ok {
		t.Fatal("the bench Job passes no -report-configmap")
	}
	asBench := configMapsAs(t, spec.ServiceAccountName)
	publisher, err := reportcm.New(asBench, releaseNS, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: releaseNS}})
	})
	if err := publisher.Check(ctx); err != nil {
		t.Fatalf("dry run as %s: %v", spec.ServiceAccountName, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: name}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run left ConfigMap %s behind: %v", name, err)
	}
	first, second := tinyReport(t, time.Hour), tinyReport(t, 2*time.Hour)
	for _, rep := range []*bench.Report{first, second} { // create, then replace
		if err := publisher.Publish(ctx, rep); err != nil {
			t.Fatalf("publishing as %s: %v", spec.ServiceAccountName, err)
		}
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: name}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Annotations[reportcm.AnnotationCompletedAt] != second.FinishedAt.Format(time.RFC3339) {
		t.Errorf("annotations %v, want the second report's completion time", cm.Annotations)
	}
	for _, key := range []string{bench.ReportJSON, bench.ReportMarkdown, bench.ConvergenceSVG} {
		if cm.Data[key] == "" {
			t.Errorf("ConfigMap %s has no %s", name, key)
		}
	}
	other, err := reportcm.New(asBench, releaseNS, "another-report")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(ctx, first); !apierrors.IsForbidden(err) {
		t.Errorf("writing another ConfigMap as %s: err = %v, want Forbidden", spec.ServiceAccountName, err)
	}
}

// configMapsAs is a client that impersonates a ServiceAccount of the release namespace.
func configMapsAs(t *testing.T, serviceAccount string) corev1client.ConfigMapsGetter {
	t.Helper()
	cfg := rest.CopyConfig(apiServer.config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceAccountUser(serviceAccount),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
	}
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// tinyReport is a two-run report of one read test, finished after the given time.
func tinyReport(t *testing.T, after time.Duration) *bench.Report {
	t.Helper()
	tests, err := bench.SelectTests([]string{"seq1m-q1t1-read"})
	if err != nil {
		t.Fatal(err)
	}
	sets, err := bench.ParseWorkingSets([]string{"50%"}, 64<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	r := &bench.Report{SchemaVersion: bench.SchemaVersion, StartedAt: start, FinishedAt: start.Add(after),
		Config: bench.Config{Targets: []bench.Target{{Name: "volume", Path: "/data/bench.dat"}}, Runs: 2,
			WorkingSets: sets, Tests: tests, PlotTest: tests[0].ID, ConvergeFraction: 0.9}}
	for run := 1; run <= 2; run++ {
		r.Results = append(r.Results, bench.Result{WorkingSet: "50%", Target: "volume", Run: run, Test: tests[0].ID,
			Measurement: bench.Measurement{MBps: float64(50 * run), IOPS: float64(50 * run), IOBytes: 32 << 20}})
	}
	bench.Analyze(r)
	return r
}
