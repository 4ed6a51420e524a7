package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// chartRegistrarContainer renders the chart with its default values, as
// `helm template` would, and returns the node DaemonSet's registrar container.
func chartRegistrarContainer(t *testing.T) corev1.Container {
	t.Helper()
	ch, err := loader.Load("../../../../charts/ssdcache")
	if err != nil {
		t.Fatal(err)
	}
	release := chartutil.ReleaseOptions{Name: "ssd", Namespace: "ssdcache-system", IsInstall: true, Revision: 1}
	values, err := chartutil.ToRenderValues(ch, map[string]any{}, release, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.TrimPrefix(strings.TrimSpace(files["ssdcache/templates/node-daemonset.yaml"]), "---")
	var ds appsv1.DaemonSet
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096).Decode(&ds); err != nil {
		t.Fatal(err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "node-driver-registrar" {
			return c
		}
	}
	t.Fatalf("the chart's node DaemonSet has no node-driver-registrar container:\n%s", manifest)
	return corev1.Container{}
}

// TestChartCommandLine: every flag the chart passes is one the stand-in takes,
// its value reaches the setting upstream gives it, and the chart mounts the
// directories the registrar uses.
func TestChartCommandLine(t *testing.T) {
	c := chartRegistrarContainer(t)
	t.Logf("the chart's registrar args: %q", c.Args)
	cfg, err := parseFlags(c.Args)
	if err != nil {
		t.Fatalf("the chart's args %q: %v", c.Args, err)
	}
	got := map[string]string{"csi-address": cfg.csiAddress, "kubelet-registration-path": cfg.kubeletRegistrationPath,
		"plugin-registration-path": cfg.pluginRegistrationPath, "http-endpoint": cfg.httpEndpoint}
	for _, arg := range c.Args {
		name, value, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if field, ok := got[name]; ok && field != value {
			t.Errorf("%s gives %q, want %q", arg, field, value)
		}
		if name == "timeout" {
			if timeout, err := time.ParseDuration(value); err != nil || timeout != cfg.timeout {
				t.Errorf("%s gives timeout %s", arg, cfg.timeout)
			}
		}
	}
	// The chart leaves --plugin-registration-path at its default and mounts kubelet's registry there.
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = true
	}
	for _, dir := range []string{cfg.pluginRegistrationPath, filepath.Dir(cfg.csiAddress)} {
		if !mounted[dir] {
			t.Errorf("the chart mounts nothing at %s, which the registrar uses (mounts: %v)", dir, c.VolumeMounts)
		}
	}
}

// TestBadCommandLinesAreRejected: each case breaks one rule of an otherwise
// good command line, and the process exits 2 as it does today.
func TestBadCommandLinesAreRejected(t *testing.T) {
	const kubelet = "--kubelet-registration-path=/var/lib/kubelet/plugins/x/csi.sock"
	for _, args := range [][]string{
		{"--csi-address=/csi/csi.sock"},            // --kubelet-registration-path is required
		{"--kubelet-registration-path=x/csi.sock"}, // kubelet cannot resolve a relative path
		{kubelet, "--csi-address="},
		{kubelet, "--plugin-registration-path="},
		{kubelet, "--timeout=0s"},
		{kubelet, "stray"},
		{kubelet, "--mode=kubelet-registration-probe"}, // an upstream flag the stand-in lacks
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted it, want an error", args)
		}
	}
	if _, err := parseFlags([]string{kubelet}); err != nil {
		t.Errorf("parseFlags(%q) = %v, want the base of the cases above accepted", kubelet, err)
	}
	cmd := registrarCommand("--csi-address=/csi/csi.sock")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("exit code of a bad command line = %d, want 2; output:\n%s", code, out)
	}
}
