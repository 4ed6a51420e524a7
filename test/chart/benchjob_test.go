package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
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
// run takes at most 30 minutes on a 150 MB/s HDD (prefill, every pass at HDD
// speed, every pause), as the arithmetic in values.yaml says, and the Job's
// deadline leaves the binary time to publish a report cut by -time-limit.
// The cache size comes from the chart's class (10% of the volume), and each
// working set has a PVC of its own.
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
		if err != nil || d < 0 {
			t.Fatalf("-%s=%s: want a duration (%v)", name, arg(name), err)
		}
		return d
	}
	if got, want := arg("cache-size"), r.one(t, "StorageClass", "ssd-ssdcache-cached").Object["parameters"].(map[string]any)[ssdv1.ParamCacheSize]; got != want {
		t.Errorf("-cache-size=%s, want the class's %s=%v", got, ssdv1.ParamCacheSize, want)
	}
	size, err := ssdv1.ParseCacheSize(arg("cache-size"))
	if err != nil {
		t.Fatal(err)
	}
	volume, err := bench.ParseBytes("volume-size", arg("volume-size"))
	if err != nil {
		t.Fatal(err)
	}
	cacheSize, _, err := size.ResolveCapped(volume)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := bench.ParseWorkingSets(strings.Split(arg("working-sets"), ","), cacheSize, false)
	if err != nil {
		t.Fatal(err)
	}
	if claims := r.ofKind("PersistentVolumeClaim"); len(claims) != len(sets) {
		t.Errorf("%d bench PVCs for %d working sets; want one each, so each starts on a fresh cache", len(claims), len(sets))
	}
	tests, err := bench.SelectTests(strings.Split(arg("tests"), ","))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := strconv.Atoi(arg("runs"))
	if err != nil {
		t.Fatal(err)
	}
	var allSets int64
	for _, ws := range sets {
		allSets += ws.Bytes
	}
	prefill := math.Ceil(float64(allSets) / hddMBps)
	measuring := float64(runs*len(tests)) * math.Ceil(float64(allSets)/hddMBps)
	if rt := duration("runtime"); rt > 0 {
		measuring = math.Min(measuring, float64(len(sets)*runs*len(tests))*rt.Seconds())
	}
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
	r, err := renderValues(loadChart(t), benchOn(map[string]any{"runtime": "20s", "timeLimitMinutes": 90,
		"extraArgs": []any{"-plot-test=rnd4k-q1t1-read", "-seed=7"}}))
	if err != nil {
		t.Fatal(err)
	}
	job := r.benchJob(t)
	mustHaveArgs(t, container(t, job.Spec.Template.Spec, "bench"), "-runtime=20s", "-time-limit=90m", "-plot-test=rnd4k-q1t1-read", "-seed=7")
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 90*60+300 {
		t.Errorf("activeDeadlineSeconds = %v, want %d", d, 90*60+300)
	}
}

// TestBenchGivesEachWorkingSetItsOwnVolume: one PVC per working set, mounted
// where the Job's {ws} path reads it.
func TestBenchGivesEachWorkingSetItsOwnVolume(t *testing.T) {
	r, err := renderValues(loadChart(t), benchOn(nil))
	if err != nil {
		t.Fatal(err)
	}
	spec := r.benchJob(t).Spec.Template.Spec
	c := container(t, spec, "bench")
	mustHaveArgs(t, c, "-target=volume=/data/ws-"+bench.WorkingSetPlaceholder+"/bench.dat")
	claims := r.ofKind("PersistentVolumeClaim")
	if len(claims) != 3 || len(spec.Volumes) != 3 || len(c.VolumeMounts) != 3 {
		t.Fatalf("%d PVCs, %d volumes, %d mounts; want 3 of each (25%%, 50%%, 75%%)", len(claims), len(spec.Volumes), len(c.VolumeMounts))
	}
	for i := range 3 {
		n := strconv.Itoa(i + 1)
		v, m := spec.Volumes[i], c.VolumeMounts[i]
		if claims[i].GetName() != "ssd-ssdcache-bench-1-ws"+n || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != claims[i].GetName() ||
			m.Name != v.Name || m.MountPath != "/data/ws-"+n {
			t.Errorf("working set %s: PVC %s, volume %+v, mount %+v; want PVC ssd-ssdcache-bench-1-ws%s at /data/ws-%s", n, claims[i].GetName(), v, m, n, n)
		}
	}
}

// TestBenchCacheSizeFromTheClass: without bench.cacheSize the Job is given the
// class's cache size; a class without a cache is refused.
func TestBenchCacheSizeFromTheClass(t *testing.T) {
	ch := loadChart(t)
	r, err := renderValues(ch, map[string]any{"storageClass": map[string]any{"create": true, "cacheSize": "20Gi"},
		"bench": map[string]any{"enabled": true, "volumeSize": "200Gi"}})
	if err != nil {
		t.Fatal(err)
	}
	mustHaveArgs(t, container(t, r.benchJob(t).Spec.Template.Spec, "bench"), "-cache-size=20Gi", "-volume-size=200Gi")
	given, err := renderValues(ch, benchOn(map[string]any{"cacheSize": "1Gi"}))
	if err != nil {
		t.Fatal(err)
	}
	mustHaveArgs(t, container(t, given.benchJob(t).Spec.Template.Spec, "bench"), "-cache-size=1Gi")
	_, err = renderValues(ch, map[string]any{"storageClass": map[string]any{"create": true, "cacheMode": "none"}, "bench": map[string]any{"enabled": true}})
	if err == nil || !strings.Contains(err.Error(), `storageClass.cacheMode "none"`) {
		t.Errorf("a bench on a class without a cache: err = %v, want it refused naming storageClass.cacheMode", err)
	}
	_, err = renderValues(ch, map[string]any{"bench": map[string]any{"enabled": true, "storageClassName": "elsewhere"}})
	if err == nil || !strings.Contains(err.Error(), "StorageClass elsewhere could not be read") || !strings.Contains(err.Error(), "set bench.cacheSize") {
		t.Errorf("another class without a cluster to read it from: err = %v, want it to ask for bench.cacheSize", err)
	}
}

// TestBenchRunIsNamedByItsRunID: the Job and its PVCs are named by
// bench.runId, not by what an upgrade changes (values, image), so only a new
// runId makes a new run.
func TestBenchRunIsNamedByItsRunID(t *testing.T) {
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
	if changed := name(2, map[string]any{"runs": 5}); changed != first {
		t.Errorf("an upgrade that changes bench.runs renamed the Job from %s to %s: it would run again", first, changed)
	}
	if again := name(2, map[string]any{"runId": 2}); again != "ssd-ssdcache-bench-2" {
		t.Errorf("runId 2 names the Job %s, want ssd-ssdcache-bench-2", again)
	}
	long, err := renderValues(ch, map[string]any{"fullnameOverride": strings.Repeat("a", 63),
		"storageClass": map[string]any{"create": true}, "bench": map[string]any{"enabled": true, "runId": strings.Repeat("7", 20)}})
	if err != nil {
		t.Fatal(err)
	}
	if jobs := long.ofKind("Job"); len(jobs) != 1 || len(jobs[0].GetName()) > 63 {
		t.Errorf("with a 63-character fullname the Jobs are %v; want one named within 63 characters", long.names())
	}
	for _, bad := range []any{"Run_1", strings.Repeat("7", 21), ""} {
		if _, err := renderValues(ch, benchOn(map[string]any{"runId": bad})); err == nil || !strings.Contains(err.Error(), "runId") {
			t.Errorf("runId %q: err = %v, want it refused", bad, err)
		}
	}
}

// TestUpgradeLeavesAnExistingRunAlone: on a real API server, with Helm's
// lookup and Helm's three-way patch, an upgrade that changes the image and
// the bench's values leaves the run's Job and PVCs as they are (the Job is
// not recreated, so it does not run again), where rendering the new values
// into the same Job would be refused (its template is immutable); a new
// runId makes a new Job.
func TestUpgradeLeavesAnExistingRunAlone(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	ch := loadChart(t)
	rev1 := benchOn(nil)
	rev2 := benchOn(map[string]any{"runs": 5})
	rev2["image"] = map[string]any{"tag": "0.2.0"}
	installed := renderBench(t, ch, rev1, 1, false)
	for _, o := range installed {
		created := o.DeepCopy()
		if err := c.Create(ctx, created); err != nil {
			t.Fatalf("installing %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), created, client.PropagationPolicy("Background")) })
	}
	jobName := installed[len(installed)-1].GetName()
	upgraded := renderBench(t, ch, rev2, 2, true)
	if len(upgraded) != len(installed) {
		t.Fatalf("the upgrade renders %d bench objects, the install %d", len(upgraded), len(installed))
	}
	for i, o := range upgraded {
		if err := helmUpdate(ctx, c, installed[i], o); err != nil {
			t.Errorf("upgrading %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	var job batchv1.Job
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: jobName}, &job); err != nil {
		t.Fatal(err)
	}
	if img := job.Spec.Template.Spec.Containers[0].Image; strings.HasSuffix(img, ":0.2.0") {
		t.Errorf("the upgrade changed the run's image to %s", img)
	}
	// Without the lookup, the same Job name with the new template: refused.
	fresh := renderBench(t, ch, rev2, 2, false)
	if err := helmUpdate(ctx, c, installed[len(installed)-1], fresh[len(fresh)-1]); !apierrors.IsInvalid(err) {
		t.Errorf("patching the run's template: err = %v, want it refused as immutable (the test no longer shows why the run is left alone)", err)
	}
	rev3 := benchOn(map[string]any{"runId": "2"})
	next := renderBench(t, ch, rev3, 3, true)
	if got := next[len(next)-1].GetName(); got == jobName || got != "ssd-ssdcache-bench-2" {
		t.Errorf("runId 2 renders Job %s, want ssd-ssdcache-bench-2", got)
	}
}

// renderBench renders the bench's PVCs and Job (in that order), with Helm's
// lookup reading the test's API server when withCluster.
func renderBench(t *testing.T, ch *chart.Chart, values map[string]any, revision int, withCluster bool) []*unstructured.Unstructured {
	t.Helper()
	values = maps.Clone(values)
	values["node"] = installValues()["node"]
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNS, IsInstall: revision == 1, IsUpgrade: revision > 1, Revision: revision}
	top, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.Engine{}
	if withCluster {
		eng = engine.New(apiServer.config)
	}
	files, err := eng.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	name := ch.Name() + "/templates/bench-job.yaml"
	objs, err := decodeObjects(name, files[name])
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 || objs[len(objs)-1].GetKind() != "Job" {
		t.Fatalf("bench-job.yaml renders %d objects, the last not a Job", len(objs))
	}
	for _, o := range objs {
		o.SetNamespace(releaseNS)
	}
	return objs
}

// helmUpdate changes a live object from the manifest of the last release to
// the new one as `helm upgrade` does: a three-way strategic merge patch of
// the old manifest, the new one and the live object.
func helmUpdate(ctx context.Context, c client.Client, original, modified *unstructured.Unstructured) error {
	live := original.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(original), live); err != nil {
		return err
	}
	var schema any = &batchv1.Job{}
	if original.GetKind() == "PersistentVolumeClaim" {
		schema = &corev1.PersistentVolumeClaim{}
	}
	meta, err := strategicpatch.NewPatchMetaFromStruct(schema)
	if err != nil {
		return err
	}
	var docs [3][]byte
	for i, o := range []*unstructured.Unstructured{original, modified, live} {
		if docs[i], err = json.Marshal(o.Object); err != nil {
			return err
		}
	}
	patch, err := strategicpatch.CreateThreeWayMergePatch(docs[0], docs[1], docs[2], meta, true)
	if err != nil {
		return err
	}
	return c.Patch(ctx, live, client.RawPatch(types.StrategicMergePatchType, patch))
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
		{"bench": map[string]any{"enabled": true, "storageClassName": "elsewhere", "cacheSize": "10%"}},
	} {
		if _, err := renderValues(ch, ok); err != nil {
			t.Errorf("values %v were refused: %v", ok, err)
		}
	}
}

// TestBenchReadsAnotherClassFromTheCluster: with bench.storageClassName and
// no bench.cacheSize, the Job gets the class's ssdcache.io/cache-size as the
// cluster has it.
func TestBenchReadsAnotherClassFromTheCluster(t *testing.T) {
	ctx, c := needAPIServer(t)
	sc := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{"name": "bench-elsewhere"}, "provisioner": ssdv1.DriverName,
		"parameters": map[string]any{ssdv1.ParamCacheMode: ssdv1.CacheModeReadCache, ssdv1.ParamCacheSize: "7%"}}}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), sc) })
	objs := renderBench(t, loadChart(t), map[string]any{"bench": map[string]any{"enabled": true, "storageClassName": "bench-elsewhere"}}, 1, true)
	job := typed[batchv1.Job](t, objs[len(objs)-1])
	mustHaveArgs(t, container(t, job.Spec.Template.Spec, "bench"), "-cache-size=7%", "-volume-size=50Gi")
}

// TestExampleBenchJobIsBoundedAndUsesTheChartsClass: deploy/examples/bench-job.yaml
// names the class the README's install creates, the image of the chart's
// release, a working set per PVC, a runtime and time limit, and a deadline
// that leaves the bench 5 minutes to publish.
func TestExampleBenchJobIsBoundedAndUsesTheChartsClass(t *testing.T) {
	ch := loadChart(t)
	// The README's install: release ssdcache, storageClass.create=true.
	values := map[string]any{"node": installValues()["node"], "storageClass": map[string]any{"create": true}}
	top, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: "ssdcache", Namespace: releaseNS, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	classes, err := decodeObjects("storageclass.yaml", files["ssdcache/templates/storageclass.yaml"])
	if err != nil || len(classes) != 1 {
		t.Fatalf("the README's install renders classes %v (%v)", classes, err)
	}
	job := exampleBenchJob(t)
	spec := job.Spec.Template.Spec
	c := container(t, spec, "bench")
	if want := "ssdcache/ssdcache:" + ch.Metadata.AppVersion; c.Image != want {
		t.Errorf("the example runs image %s, want the release's %s", c.Image, want)
	}
	arg := func(name string) string {
		v, ok := argWithPrefix(c, "-"+name+"=")
		if !ok {
			t.Fatalf("the example passes no -%s", name)
		}
		return v
	}
	if _, err := time.ParseDuration(arg("runtime")); err != nil {
		t.Errorf("-runtime=%s: %v", arg("runtime"), err)
	}
	limit, err := time.ParseDuration(arg("time-limit"))
	if err != nil || limit <= 0 {
		t.Fatalf("-time-limit=%s: want a positive duration (%v)", arg("time-limit"), err)
	}
	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != int64(limit.Seconds())+300 {
		t.Errorf("activeDeadlineSeconds = %v, want -time-limit + 300 s = %d", d, int64(limit.Seconds())+300)
	}
	sets := strings.Split(arg("working-sets"), ",")
	if arg("target") != "volume=/data/ws-"+bench.WorkingSetPlaceholder+"/bench.dat" || len(spec.Volumes) != len(sets) {
		t.Errorf("-target=%s with %d volumes for %d working sets; want a {ws} path and a volume each", arg("target"), len(spec.Volumes), len(sets))
	}
	claims := map[string]bool{}
	for _, o := range exampleObjects(t) {
		if o.GetKind() != "PersistentVolumeClaim" {
			continue
		}
		pvc := typed[corev1.PersistentVolumeClaim](t, o)
		claims[pvc.Name] = true
		if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != classes[0].GetName() {
			t.Errorf("PVC %s has class %v; the README's install creates %s", pvc.Name, pvc.Spec.StorageClassName, classes[0].GetName())
		}
		if got := pvc.Spec.Resources.Requests.Storage().String(); got != arg("volume-size") {
			t.Errorf("PVC %s requests %s, but -volume-size=%s", pvc.Name, got, arg("volume-size"))
		}
	}
	for i, v := range spec.Volumes {
		n := strconv.Itoa(i + 1)
		if v.PersistentVolumeClaim == nil || !claims[v.PersistentVolumeClaim.ClaimName] || c.VolumeMounts[i].Name != v.Name || c.VolumeMounts[i].MountPath != "/data/ws-"+n {
			t.Errorf("volume %d (%+v) is not a PVC of the example mounted at /data/ws-%s", i, v, n)
		}
	}
}

func exampleObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	const path = "../../deploy/examples/bench-job.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(path, string(data))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestBenchRunIDUnsetByReuseValues: `helm upgrade --reuse-values` from a
// chart without bench.runId hands the templates no runId; the run is 1.
func TestBenchRunIDUnsetByReuseValues(t *testing.T) {
	ch := loadChart(t)
	bench := ch.Values["bench"].(map[string]any)
	delete(bench, "runId")
	r, err := renderRevision(ch, benchOn(nil), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.benchJob(t).Name; got != "ssd-ssdcache-bench-1" {
		t.Errorf("without bench.runId the Job is %s, want ssd-ssdcache-bench-1", got)
	}
}
