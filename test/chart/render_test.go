// Package chart tests the Helm chart in charts/ssdcache as code: it renders the
// chart through Helm's Go SDK with several values files, checks the rendered
// objects, checks that the chart's RBAC covers the code's RBAC markers, and
// (with an API server, see apply_test.go) applies every object server-side.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	chartDir    = "../../charts/ssdcache"
	releaseName = "ssd"
	releaseNS   = "ssdcache-system"
)

// valuesFiles are the configurations every test renders; "" is the chart's
// defaults with installValues.
var valuesFiles = []string{"", "testdata/full.yaml", "testdata/groups.yaml", "testdata/fleet.yaml", "testdata/external-rbac.yaml", "testdata/bench-tiny.yaml"}

// rendered is one render of the chart.
type rendered struct {
	objects []*unstructured.Unstructured // templates, in file order
	crds    []*unstructured.Unstructured // crds/, which Helm installs first
	notes   string
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return ch
}

// render renders the chart with a values file ("" for the defaults) as
// `helm template` would, schema validation included.
func render(t *testing.T, valuesFile string) rendered {
	t.Helper()
	r, err := renderValues(loadChart(t), readValues(t, valuesFile))
	if err != nil {
		t.Fatalf("rendering with %q: %v", valuesFile, err)
	}
	return r
}

// installValues are what every install gives beyond the chart's defaults:
// the HDDs of the origin pool, here picked as the README's install picks
// them. The chart refuses an install without origin disks (notes_test.go).
func installValues() map[string]any {
	return map[string]any{"node": map[string]any{"originSelector": map[string]any{"byId": "/dev/disk/by-id/ata-ST4000NM*"}}}
}

func readValues(t *testing.T, valuesFile string) map[string]any {
	t.Helper()
	if valuesFile == "" {
		return installValues()
	}
	v, err := chartutil.ReadValuesFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// renderValues renders values as an install, with installValues when they
// name no origin disks (node.originDevices, node.originSelector or
// node.nodeGroups): tests of other values need not repeat them.
// renderExactly renders values as given.
func renderValues(ch *chart.Chart, values map[string]any) (rendered, error) {
	return renderRevision(ch, values, 1)
}

func renderExactly(ch *chart.Chart, values map[string]any) (rendered, error) {
	return renderValuesAt(ch, values, 1)
}

// renderRevision renders as `helm upgrade` to the given release revision would.
func renderRevision(ch *chart.Chart, values map[string]any, revision int) (rendered, error) {
	node, _ := values["node"].(map[string]any)
	named := false
	for _, key := range []string{"originDevices", "originSelector", "nodeGroups"} {
		_, ok := node[key]
		named = named || ok
	}
	if !named {
		withNode := map[string]any{}
		maps.Copy(withNode, node)
		maps.Copy(withNode, installValues()["node"].(map[string]any))
		values = maps.Clone(values)
		if values == nil {
			values = map[string]any{}
		}
		values["node"] = withNode
	}
	return renderValuesAt(ch, values, revision)
}

func renderValuesAt(ch *chart.Chart, values map[string]any, revision int) (rendered, error) {
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNS, IsInstall: revision == 1, IsUpgrade: revision > 1, Revision: revision}
	top, err := chartutil.ToRenderValues(ch, values, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return rendered{}, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return rendered{}, err
	}
	var r rendered
	for _, name := range sortedKeys(files) {
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			r.notes = files[name]
		case strings.HasSuffix(name, ".yaml"):
			objs, err := decodeObjects(name, files[name])
			if err != nil {
				return rendered{}, err
			}
			r.objects = append(r.objects, objs...)
		}
	}
	for _, f := range ch.CRDObjects() {
		objs, err := decodeObjects(f.Filename, string(f.File.Data))
		if err != nil {
			return rendered{}, err
		}
		r.crds = append(r.crds, objs...)
	}
	return r, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decodeObjects splits a multi-document YAML file into objects, skipping empty documents.
func decodeObjects(name, text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(text), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: a document without kind, apiVersion or name: %v", name, m)
		}
		objs = append(objs, u)
	}
}

func (r rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r rendered) one(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.ofKind(kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q among %v", kind, name, r.names())
	return nil
}

// benchJob is the one bench Job, <fullname>-bench-<runId>.
func (r rendered) benchJob(t *testing.T) *batchv1.Job {
	t.Helper()
	jobs := r.ofKind("Job")
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs rendered, want the bench Job: %v", len(jobs), r.names())
	}
	if !strings.HasPrefix(jobs[0].GetName(), releaseName+"-ssdcache-bench-") {
		t.Fatalf("Job %q is not named <fullname>-bench-<runId>", jobs[0].GetName())
	}
	return typed[batchv1.Job](t, jobs[0])
}

func (r rendered) names() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	return out
}

// typed converts a rendered object into its Go type; unknown fields fail, so a
// misspelt field in a template is caught here.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

func valuesName(f string) string {
	if f == "" {
		return "defaults"
	}
	return strings.TrimSuffix(filepath.Base(f), ".yaml")
}
