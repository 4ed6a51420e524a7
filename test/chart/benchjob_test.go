package chart

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// hddMBps is the slow disk the default bench must finish on in time.
const hddMBps = 150e6

// benchOn turns the bench on with the release's StorageClass, plus extra bench values.
func benchOn(extra map[string]any) map[string]any {
	b := map[string]any{"enabled": true}
	for k, v := range extra {
		b[k] = v
	}
	return map[string]any{"storageClass": map[string]any{"create": true}, "bench": b}
}

// TestDefaultBenchFitsItsTimeLimit: from the flags the default Job passes, the
// run takes at most 30 minutes on a 150 MB/s HDD (prefill, every test at its
// runtime, every pause), as the arithmetic in values.yaml says, and the Job's
// deadline leaves the binary time to publish a report cut by -time-limit.
func TestDefaultBenchFitsItsTimeLimit(t *testing.T) {
	r, err := renderValues(loadChart(t), benchOn(nil))
	if err != nil {
		t.Fatal(err)
	}
	job := r.benchJob(t)
	c := container(t, job.Spec.Template.Spec, "bench")
	arg := func(name string) string {
		v, ok := argWithPrefix(c, "-"+name+"=")
		if !ok {
			t.Fatalf("the bench Job passes no -%s", name)
		}
		return v
	}
	duration := func(name string) time.Duration {
		d, err := time.ParseDuration(arg(name))
		if err != nil || d <= 0 {
			t.Fatalf("-%s=%s: want a positive duration (%v)", name, arg(name), err)
		}
		return d
	}
	cacheSize, err := bench.ParseBytes("cache-size", arg("cache-size"))
	if err != nil {
		t.Fatal(err)
	}
	sets, err := bench.ParseWorkingSets(strings.Split(arg("working-sets"), ","), cacheSize, true)
	if err != nil {
		t.Fatal(err)
	}
	tests, err := bench.SelectTests(strings.Split(arg("tests"), ","))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := strconv.Atoi(arg("runs"))
	if err != nil {
		t.Fatal(err)
	}
	var span int64
	for _, ws := range sets {
		span = max(span, ws.OffsetBytes+ws.Bytes)
	}
	prefill := math.Ceil(float64(span) / hddMBps)
	measuring := float64(len(sets)*runs*len(tests)) * duration("runtime").Seconds()
	pauses := float64(len(sets)*(runs-1))*duration("interval").Seconds() + float64(len(sets)*runs*len(tests))*duration("test-interval").Seconds()
	total := time.Duration(prefill+measuring+pauses) * time.Second
	limit := duration("time-limit")
	if total > limit || limit > 30*time.Minute {
		t.Errorf("the default bench takes %s on a 150 MB/s HDD (prefill %.0f s, tests %.0f s, pauses %.0f s); time limit %s; want both within 30m",
			total, prefill, measuring, pauses, limit)
	}
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`(?m)^#\s+total\s+=\s+%d s$`, int(total.Seconds())); !regexp.MustCompile(want).Match(values) {
		t.Errorf("values.yaml does not give the bench's total as %d s (prefill %.0f, tests %.0f, pauses %.0f)", int(total.Seconds()), prefill, measuring, pauses)
	}
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != int64(limit.Seconds())+300 {
		t.Errorf("activeDeadlineSeconds = %v, want -time-limit + 300 s = %d", d, int64(limit.Seconds())+300)
	}
}

// TestBenchValuesReachTheJob: runtime, time limit and extra arguments.
func TestBenchValuesReachTheJob(t *testing.T) {
	r, err := renderValues(loadChart(t), benchOn(map[string]any{"runtime": "0", "timeLimitMinutes": 90,
		"extraArgs": []any{"-plot-test=rnd4k-q1t1-read", "-seed=7"}}))
	if err != nil {
		t.Fatal(err)
	}
	job := r.benchJob(t)
	mustHaveArgs(t, container(t, job.Spec.Template.Spec, "bench"), "-runtime=0", "-time-limit=90m", "-plot-test=rnd4k-q1t1-read", "-seed=7")
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 90*60+300 {
		t.Errorf("activeDeadlineSeconds = %v, want %d", d, 90*60+300)
	}
}

// TestBenchJobNameFollowsItsPodTemplate: a Job's pod template is immutable, so
// the name changes with it (a new Job replaces the old one on `helm upgrade`),
// and stays when an upgrade changes nothing in it (the finished Job stays).
func TestBenchJobNameFollowsItsPodTemplate(t *testing.T) {
	ch := loadChart(t)
	name := func(revision int, bench map[string]any) string {
		r, err := renderRevision(ch, benchOn(bench), revision)
		if err != nil {
			t.Fatal(err)
		}
		j := r.benchJob(t)
		if len(j.Name) > 63 {
			t.Errorf("Job name %q is longer than 63 characters, the limit of its pods' job-name label", j.Name)
		}
		return j.Name
	}
	first := name(1, nil)
	if again := name(2, nil); again != first {
		t.Errorf("an upgrade that changes nothing in the bench renamed its Job from %s to %s", first, again)
	}
	if changed := name(2, map[string]any{"runs": 5}); changed == first {
		t.Errorf("runs 4 and runs 5 render the same Job name %s; helm upgrade would patch an immutable template", first)
	}
	long, err := renderValues(ch, map[string]any{"fullnameOverride": strings.Repeat("a", 63),
		"storageClass": map[string]any{"create": true}, "bench": map[string]any{"enabled": true}})
	if err != nil {
		t.Fatal(err)
	}
	if jobs := long.ofKind("Job"); len(jobs) != 1 || len(jobs[0].GetName()) > 63 {
		t.Errorf("with a 63-character fullname the Jobs are %v; want one named within 63 characters", long.names())
	}
}

// TestUpgradeReplacesAFinishedBenchJob: on a real API server, the Job of the
// next revision is created next to the previous one (which Helm then deletes),
// whereas patching the previous Job's template, what a fixed name would make
// `helm upgrade` do, is refused.
func TestUpgradeReplacesAFinishedBenchJob(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	ch := loadChart(t)
	job := func(revision int, bench map[string]any) *unstructured.Unstructured {
		r, err := renderRevision(ch, benchOn(bench), revision)
		if err != nil {
			t.Fatal(err)
		}
		r.benchJob(t)
		return r.ofKind("Job")[0].DeepCopy()
	}
	apply := func(j *unstructured.Unstructured) error {
		t.Cleanup(func() { _ = c.Delete(context.Background(), j.DeepCopy(), client.PropagationPolicy("Background")) })
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(j.DeepCopy()), client.FieldOwner("helm"), client.ForceOwnership)
	}
	first, next := job(1, nil), job(2, map[string]any{"runs": 5})
	if err := apply(first); err != nil {
		t.Fatalf("installing the bench Job: %v", err)
	}
	if err := apply(job(2, nil)); err != nil {
		t.Errorf("an upgrade that changes nothing in the bench: %v", err)
	}
	if err := apply(next); err != nil {
		t.Errorf("the next revision's Job %s: %v", next.GetName(), err)
	}
	patched := next.DeepCopy()
	patched.SetName(first.GetName())
	if err := apply(patched); !apierrors.IsInvalid(err) {
		t.Errorf("changing the template of Job %s: err = %v, want it refused as immutable (the test no longer shows why the name changes)", first.GetName(), err)
	}
}

// TestBenchRefusesImpossibleValues: each mistake is refused at install time
// with a message naming the value.
func TestBenchRefusesImpossibleValues(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no StorageClass", map[string]any{"bench": map[string]any{"enabled": true}}, "set storageClass.create=true (the release's cached class) or bench.storageClassName"},
		{"class cache over 100%", map[string]any{"storageClass": map[string]any{"cacheSize": "150%"}}, "cacheSize"},
		{"class cache of 0%", map[string]any{"storageClass": map[string]any{"cacheSize": "0%"}}, "cacheSize"},
		{"class cache of a fraction of a percent", map[string]any{"storageClass": map[string]any{"cacheSize": "2.5%"}}, "cacheSize"},
		{"working set over 100%", benchOn(map[string]any{"workingSets": []any{"150%"}}), "workingSets"},
		{"working set just over 100%", benchOn(map[string]any{"workingSets": []any{"100.5%"}}), "workingSets"},
		{"working set of 0%", benchOn(map[string]any{"workingSets": []any{"0%"}}), "workingSets"},
		{"no runs", benchOn(map[string]any{"runs": 0}), "runs"},
		{"negative runtime", benchOn(map[string]any{"runtime": "-20s"}), "runtime"},
		{"runtime without unit", benchOn(map[string]any{"runtime": "20"}), "runtime"},
		{"no time limit", benchOn(map[string]any{"timeLimitMinutes": 0}), "timeLimitMinutes"},
		{"extra argument that is no flag", benchOn(map[string]any{"extraArgs": []any{"seed=7"}}), "extraArgs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderValues(ch, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to name %q", err, c.want)
			}
		})
	}
	for _, ok := range []map[string]any{
		benchOn(map[string]any{"workingSets": []any{"100%", "12.5%", "256Mi"}}),
		{"storageClass": map[string]any{"cacheSize": "100%"}},
		{"bench": map[string]any{"enabled": true, "storageClassName": "elsewhere"}},
	} {
		if _, err := renderValues(ch, ok); err != nil {
			t.Errorf("values %v were refused: %v", ok, err)
		}
	}
}
