package reportcm

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

var finished = time.Date(2026, 11, 30, 4, 5, 6, 0, time.UTC)

// report is a one-target, two-run benchmark with real rendered output.
func report(t *testing.T) *bench.Report {
	t.Helper()
	tests, err := bench.SelectTests([]string{"seq1m-q8t1-read"})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := bench.ParseWorkingSets([]string{"4Mi"}, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	r := &bench.Report{
		SchemaVersion: bench.SchemaVersion, FinishedAt: finished,
		Config: bench.Config{Targets: []bench.Target{{Name: "volume", Path: "/data/bench.dat"}},
			Runs: 2, WorkingSets: ws, Tests: tests, PlotTest: tests[0].ID, ConvergeFraction: 0.9},
	}
	for run := 1; run <= 2; run++ {
		r.Results = append(r.Results, bench.Result{WorkingSet: "4Mi", Target: "volume", Run: run, Test: tests[0].ID,
			Measurement: bench.Measurement{MBps: float64(100 * run), IOPS: float64(100 * run), IOBytes: 4 << 20}})
	}
	bench.Analyze(r)
	return r
}

func newPublisher(t *testing.T, cs *fake.Clientset) *Publisher {
	t.Helper()
	p, err := New(cs.CoreV1(), "bench-ns", "ssd-ssdcache-bench-report")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func get(t *testing.T, cs *fake.Clientset) *corev1.ConfigMap {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("bench-ns").Get(context.Background(), "ssd-ssdcache-bench-report", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestPublishCreatesConfigMap(t *testing.T) {
	cs := fake.NewClientset()
	if err := newPublisher(t, cs).Publish(context.Background(), report(t)); err != nil {
		t.Fatal(err)
	}
	cm := get(t, cs)
	for _, key := range []string{bench.ReportJSON, bench.ReportMarkdown, bench.ConvergenceSVG} {
		if cm.Data[key] == "" {
			t.Errorf("data has no %s; keys %v", key, keys(cm.Data))
		}
	}
	var back bench.Report
	if err := json.Unmarshal([]byte(cm.Data[bench.ReportJSON]), &back); err != nil || len(back.Results) != 2 {
		t.Errorf("report.json does not hold the report: %v, %d results", err, len(back.Results))
	}
	if !strings.HasPrefix(cm.Data[bench.ConvergenceSVG], "<svg") && !strings.HasPrefix(cm.Data[bench.ConvergenceSVG], "<?xml") {
		t.Errorf("convergence.svg starts %.40q", cm.Data[bench.ConvergenceSVG])
	}
	if cm.Labels["app.kubernetes.io/name"] != "ssdcache" || cm.Labels["app.kubernetes.io/component"] != "bench" {
		t.Errorf("labels %v", cm.Labels)
	}
	want := map[string]string{AnnotationCompletedAt: "2026-11-30T04:05:06Z", AnnotationOutcome: "complete"}
	for k, v := range want {
		if cm.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, cm.Annotations[k], v)
		}
	}
	if _, ok := cm.Annotations[AnnotationOmitted]; ok {
		t.Errorf("a small report omitted %q", cm.Annotations[AnnotationOmitted])
	}
}

// A second run replaces the first run's report, including keys it no longer
// has, and keeps what other writers added.
func TestPublishReplacesPreviousReport(t *testing.T) {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ssd-ssdcache-bench-report", Namespace: "bench-ns",
		Annotations: map[string]string{"note": "kept"}}}
	cs := fake.NewClientset(old)
	p := newPublisher(t, cs)
	r := report(t)
	r.Error = "fio: exit 1"
	if err := p.Publish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got := get(t, cs).Annotations[AnnotationOutcome]; got != "stopped early: fio: exit 1" {
		t.Errorf("outcome %q", got)
	}
	r = report(t)
	r.FinishedAt = finished.Add(time.Hour)
	if err := p.Publish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	cm := get(t, cs)
	if cm.Annotations[AnnotationOutcome] != "complete" || cm.Annotations[AnnotationCompletedAt] != "2026-11-30T05:05:06Z" {
		t.Errorf("second publish left annotations %v", cm.Annotations)
	}
	if cm.Annotations["note"] != "kept" {
		t.Errorf("apply dropped an annotation it does not own: %v", cm.Annotations)
	}
}

func TestFitDropsSVGThenMarkdown(t *testing.T) {
	files := []bench.File{
		{Name: bench.ReportJSON, Data: make([]byte, 100)},
		{Name: bench.ReportMarkdown, Data: make([]byte, 100)},
		{Name: bench.ConvergenceSVG, Data: make([]byte, 1000)},
	}
	all := 3*100 + len(bench.ReportJSON) + len(bench.ReportMarkdown) + len(bench.ConvergenceSVG) + 900
	cases := []struct {
		limit    int
		kept     string
		omitted  int
		errorHas string
	}{
		{all, "convergence.svg report.json report.md", 0, ""},
		{all - 1, "report.json report.md", 1, ""},
		{200, "report.json", 2, ""},
		{50, "", 0, "report.json alone is 111 bytes"},
	}
	for _, c := range cases {
		data, omitted, err := fit(files, c.limit)
		if c.errorHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errorHas) {
				t.Errorf("limit %d: err = %v, want %q", c.limit, err, c.errorHas)
			}
			continue
		}
		if err != nil || strings.Join(keys(data), " ") != c.kept || len(omitted) != c.omitted {
			t.Errorf("limit %d: kept %v, omitted %v, err %v; want %s and %d omitted", c.limit, keys(data), omitted, err, c.kept, c.omitted)
		}
	}
	_, omitted, _ := fit(files, 200)
	if !strings.HasPrefix(omitted[0], "convergence.svg (1000 bytes)") {
		t.Errorf("omitted %q, want the svg first with its size", omitted)
	}
}

func TestPublishAnnotatesOmittedFiles(t *testing.T) {
	r := report(t)
	// A long error makes report.json and report.md large; the svg goes first.
	r.Error = strings.Repeat("x", MaxDataBytes/2)
	cs := fake.NewClientset()
	if err := newPublisher(t, cs).Publish(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	cm := get(t, cs)
	if _, ok := cm.Data[bench.ConvergenceSVG]; ok {
		t.Errorf("kept the svg in an oversized report: %v", keys(cm.Data))
	}
	if !strings.HasPrefix(cm.Annotations[AnnotationOmitted], bench.ConvergenceSVG) {
		t.Errorf("omitted annotation %q", cm.Annotations[AnnotationOmitted])
	}
}

// dryRunsAnswered makes the fake answer dry-run patches without storing
// them, as the API server does (the fake's tracker ignores DryRun).
func dryRunsAnswered(cs *fake.Clientset, dryRuns *int) {
	cs.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		*dryRuns++
		return true, &corev1.ConfigMap{}, nil
	})
}

func TestCheckIsADryRun(t *testing.T) {
	cs := fake.NewClientset()
	var dryRuns int
	dryRunsAnswered(cs, &dryRuns)
	if err := newPublisher(t, cs).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if dryRuns != 1 {
		t.Errorf("%d dry-run patches, want 1", dryRuns)
	}
	if _, err := cs.CoreV1().ConfigMaps("bench-ns").Get(context.Background(), "ssd-ssdcache-bench-report", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Check left a ConfigMap behind: %v", err)
	}
}

func TestCheckReportsForbidden(t *testing.T) {
	cs := fake.NewClientset()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "ssd-ssdcache-bench-report", errors.New("RBAC: no patch"))
	cs.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden
	})
	err := newPublisher(t, cs).Check(context.Background())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "bench-ns/ssd-ssdcache-bench-report") {
		t.Errorf("err = %v, want a Forbidden naming the ConfigMap", err)
	}
}

func TestNewRefusesBadNames(t *testing.T) {
	cases := map[[2]string]string{
		{"bench-ns", "Report"}:   `ConfigMap name "Report"`,
		{"bench-ns", ""}:         `ConfigMap name ""`,
		{"Bench_NS", "report"}:   `namespace "Bench_NS"`,
		{"", "ssd-bench-report"}: `namespace ""`,
	}
	for in, want := range cases {
		_, err := New(fake.NewClientset().CoreV1(), in[0], in[1])
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%q, %q): err = %v, want %q", in[0], in[1], err, want)
		}
	}
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
