package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/exec"
	testingexec "k8s.io/utils/exec/testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/bench/reportcm"
)

var errNoCluster = errors.New("no API server in this test")

// noPod is a process outside any pod.
func noPod() pod {
	return pod{
		getenv:     func(string) string { return "" },
		readFile:   func(string) ([]byte, error) { return nil, os.ErrNotExist },
		configMaps: func() (corev1client.ConfigMapsGetter, error) { return nil, errNoCluster },
	}
}

// fakePod is a pod in namespace "bench" whose API server is cs. Like the API
// server, cs answers dry runs without storing anything.
func fakePod(cs *fake.Clientset) pod {
	cs.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if len(a.(k8stesting.PatchActionImpl).GetPatchOptions().DryRun) == 0 {
			return false, nil, nil
		}
		return true, &corev1.ConfigMap{}, nil
	})
	files := map[string]string{serviceAccountNamespaceFile: "bench\n"}
	return pod{
		getenv: func(string) string { return "" },
		readFile: func(name string) ([]byte, error) {
			if data, ok := files[name]; ok {
				return []byte(data), nil
			}
			return nil, os.ErrNotExist
		},
		configMaps: func() (corev1client.ConfigMapsGetter, error) { return cs.CoreV1(), nil },
	}
}

func TestPodNamespace(t *testing.T) {
	p := fakePod(fake.NewClientset())
	if ns, err := p.namespace(); ns != "bench" || err != nil {
		t.Errorf("from the token mount: %q, %v; want bench", ns, err)
	}
	p.getenv = func(k string) string { return map[string]string{"POD_NAMESPACE": "from-env"}[k] }
	if ns, err := p.namespace(); ns != "from-env" || err != nil {
		t.Errorf("with POD_NAMESPACE: %q, %v; want from-env", ns, err)
	}
	if _, err := noPod().namespace(); err == nil || !strings.Contains(err.Error(), "-report-namespace") {
		t.Errorf("outside a pod: err = %v, want it to name -report-namespace", err)
	}
}

func TestReportPublisherFlags(t *testing.T) {
	ctx := context.Background()
	if p, err := reportPublisher(ctx, reportFlags{}, noPod()); p != nil || err != nil {
		t.Errorf("no ConfigMap asked for: %v, %v; want nil, nil", p, err)
	}
	cases := map[reportFlags]string{
		{namespace: "bench"}:                     "-report-namespace \"bench\" given without -report-configmap",
		{configMap: "Report"}:                    `ConfigMap name "Report"`,
		{configMap: "r", namespace: "No_Such"}:   `namespace "No_Such"`,
		{configMap: "ssd-ssdcache-bench-report"}: "", // valid
	}
	for f, want := range cases {
		_, err := reportPublisher(ctx, f, fakePod(fake.NewClientset()))
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%+v: err = %v, want %q", f, err, want)
		}
	}
}

func TestInClusterConfigMapsOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	_, err := inClusterConfigMaps()
	if err == nil || !strings.Contains(err.Error(), "not in a Kubernetes pod") {
		t.Errorf("err = %v, want a message saying it runs outside a pod", err)
	}
}

// benchArgs plan one small read test on a file in dir, which fio would lay out first.
func benchArgs(dir string, extra ...string) []string {
	return append([]string{"-target", "volume=" + filepath.Join(dir, "bench.dat"), "-working-sets", "1Mi",
		"-runs", "1", "-tests", "seq1m-q1t1-read", "-output-dir", filepath.Join(dir, "report")}, extra...)
}

// TestRunChecksTheConfigMapBeforeBenchmarking: a ConfigMap that cannot be
// written fails in seconds with exit 2, before fio runs.
func TestRunChecksTheConfigMapBeforeBenchmarking(t *testing.T) {
	forbiddenCS := fake.NewClientset()
	forbiddenCS.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "r", errors.New("RBAC"))
	})
	forbidden := fakePod(fake.NewClientset())
	forbidden.configMaps = func() (corev1client.ConfigMapsGetter, error) { return forbiddenCS.CoreV1(), nil }
	cases := map[string]pod{"outside a pod": noPod(), "forbidden": forbidden}
	for name, p := range cases {
		fe := &testingexec.FakeExec{}
		var stderr bytes.Buffer
		code := run(context.Background(), benchArgs(t.TempDir(), "-report-configmap", "r"), system{exec: fe, pod: p, stderr: &stderr})
		if code != 2 || !strings.Contains(stderr.String(), `-report-configmap "r"`) {
			t.Errorf("%s: exit %d, stderr %q; want 2 naming -report-configmap", name, code, stderr.String())
		}
		if fe.CommandCalls != 0 {
			t.Errorf("%s: fio ran %d times before the ConfigMap was refused", name, fe.CommandCalls)
		}
	}
}

// TestRunPublishesPartialReport: when fio fails, the partial report still
// lands in the output directory and in the ConfigMap, and the exit code is 1.
func TestRunPublishesPartialReport(t *testing.T) {
	fe := &testingexec.FakeExec{CommandScript: []testingexec.FakeCommandAction{
		func(cmd string, args ...string) exec.Cmd {
			return testingexec.InitFakeCmd(&testingexec.FakeCmd{RunScript: []testingexec.FakeAction{
				func() ([]byte, []byte, error) {
					return nil, []byte("fio: injected"), &testingexec.FakeExitError{Status: 1}
				},
			}}, cmd, args...)
		},
	}}
	cs := fake.NewClientset()
	dir := t.TempDir()
	code := run(context.Background(), benchArgs(dir, "-report-configmap", "bench-report"), system{exec: fe, pod: fakePod(cs), stderr: io.Discard})
	if code != 1 {
		t.Errorf("exit %d, want 1 (fio failed)", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "report", bench.ReportJSON)); err != nil {
		t.Errorf("no report on the volume: %v", err)
	}
	cm, err := cs.CoreV1().ConfigMaps("bench").Get(context.Background(), "bench-report", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cm.Annotations[reportcm.AnnotationOutcome], "stopped early: ") || cm.Data[bench.ReportJSON] == "" {
		t.Errorf("ConfigMap annotations %v, keys %d; want a partial report", cm.Annotations, len(cm.Data))
	}
}
