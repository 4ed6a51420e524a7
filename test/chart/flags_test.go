package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartPassesOnlyRealFlags builds the three binaries and the e2e's
// node-driver-registrar stand-in, whose flags are the upstream ones the chart
// passes, and checks that every flag the chart passes to them is one they
// define, so a renamed flag fails here rather than in a crash-looping pod.
func TestChartPassesOnlyRealFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries; skipped under -short")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/ssdcache-node", "./cmd/ssdcache-controller", "./cmd/ssdcache-bench",
		"./test/e2e/sidecars/node-driver-registrar")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r := render(t, "testdata/full.yaml")
	ds := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", "ssd-ssdcache-node"))
	dep := typed[appsv1.Deployment](t, r.one(t, "Deployment", "ssd-ssdcache-controller"))
	job := r.benchJob(t)
	for _, c := range []corev1.Container{
		container(t, ds.Spec.Template.Spec, "ssdcache-node"),
		container(t, ds.Spec.Template.Spec, "node-driver-registrar"), // the image's entrypoint: no command
		container(t, dep.Spec.Template.Spec, "ssdcache-controller"),
		container(t, job.Spec.Template.Spec, "bench"),
		container(t, exampleBenchJob(t).Spec.Template.Spec, "bench"),
	} {
		binary := c.Name
		if len(c.Command) > 0 {
			binary = filepath.Base(c.Command[0])
		}
		defined := flagsOf(t, filepath.Join(bin, binary))
		for _, arg := range c.Args {
			name := strings.TrimLeft(strings.SplitN(arg, "=", 2)[0], "-")
			if !defined[name] {
				t.Errorf("container %s passes %q, but %s has no flag %q", c.Name, arg, binary, name)
			}
		}
	}
}

// exampleBenchJob is the Job of deploy/examples/bench-job.yaml, whose flags
// users copy.
func exampleBenchJob(t *testing.T) *batchv1.Job {
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
	for _, o := range objs {
		if o.GetKind() == "Job" {
			return typed[batchv1.Job](t, o)
		}
	}
	t.Fatalf("%s has no Job", path)
	return nil
}

var usageFlag = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9_.-]+)`)

// flagsOf lists the flags a Go binary prints for -help.
func flagsOf(t *testing.T, binary string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(binary, "-help").CombinedOutput() // exits non-zero after printing usage
	flags := map[string]bool{}
	for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("%s -help listed no flags:\n%s", binary, out)
	}
	return flags
}
