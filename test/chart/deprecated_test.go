package chart

import (
	"context"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// oldNamedValues are values written for releases before 0.2: node.cacheClass,
// a group's cacheClass and the lowercase storageClass.cacheMode.
func oldNamedValues() map[string]any {
	return map[string]any{
		"node": map[string]any{"cacheClass": "sata", "nodeGroups": []any{
			map[string]any{"name": "a", "nodeSelector": map[string]any{"ssdcache.io/group": "a"},
				"originSelector": map[string]any{"byId": "/dev/disk/by-id/ata-*"}},
			map[string]any{"name": "b", "nodeSelector": map[string]any{"ssdcache.io/group": "b"},
				"originSelector": map[string]any{"byId": "/dev/disk/by-id/wwn-*"}, "cacheClass": "optane"},
		}},
		"storageClass": map[string]any{"create": true, "cacheMode": "readcache"},
	}
}

// The old names still work: the DaemonSets get --device-class from them,
// the StorageClass the CRD's spelling, and NOTES.txt lists each old name
// with the new one.
func TestOldValueNamesAreHonouredWithANote(t *testing.T) {
	r, err := renderExactly(loadChart(t), oldNamedValues())
	if err != nil {
		t.Fatal(err)
	}
	for name, class := range map[string]string{"ssd-ssdcache-node-a": "sata", "ssd-ssdcache-node-b": "optane"} {
		ds := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", name))
		mustHaveArgs(t, container(t, ds.Spec.Template.Spec, "ssdcache-node"), "--device-class="+class)
	}
	sc := r.one(t, "StorageClass", "ssd-ssdcache-cached")
	if mode, _, _ := unstructured.NestedString(sc.Object, "parameters", ssdv1.ParamCacheMode); mode != "ReadCache" {
		t.Errorf("StorageClass cache-mode %q, want ReadCache", mode)
	}
	for _, want := range []string{"Deprecated values, still honoured",
		"node.cacheClass (sata): rename it node.deviceClass",
		"node.nodeGroups b: cacheClass (optane): rename it deviceClass",
		"storageClass.cacheMode readcache: write ReadCache"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
		}
	}
	if r := render(t, "testdata/full.yaml"); strings.Contains(r.notes, "Deprecated") {
		t.Errorf("NOTES.txt of values in the new names speaks of deprecated ones:\n%s", r.notes)
	}
}

// An old and a new name of one value, given different values, are refused
// with both named: which one is meant cannot be told.
func TestOldAndNewClassNamesThatDifferAreRefused(t *testing.T) {
	top := oldNamedValues()
	top["node"].(map[string]any)["deviceClass"] = "fast"
	group := oldNamedValues()
	group["node"].(map[string]any)["nodeGroups"].([]any)[1].(map[string]any)["deviceClass"] = "nvme"
	for name, c := range map[string]struct {
		values map[string]any
		want   string
	}{
		"node":  {top, `node.deviceClass is "fast" and node.cacheClass, its deprecated name, is "sata": set node.deviceClass alone`},
		"group": {group, `node.nodeGroups b: deviceClass is "nvme" and cacheClass, its deprecated name, is "optane": set deviceClass alone`},
	} {
		if _, err := renderExactly(loadChart(t), c.values); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// A StorageClass made by a release before 0.2 (cache-mode readcache) keeps
// its spelling on upgrade: its parameters cannot change, and helm upgrade
// would fail on a patch of them.
func TestUpgradeKeepsTheStorageClassesOldSpelling(t *testing.T) {
	ctx, c := needAPIServer(t)
	ch := loadChart(t)
	old := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": map[string]any{"name": "ssd-ssdcache-cached"}, "provisioner": ssdv1.DriverName,
		"parameters": map[string]any{ssdv1.ParamCacheMode: "readcache", ssdv1.ParamCacheSize: "10%"}}}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), old) })
	values := installValues()
	values["storageClass"] = map[string]any{"create": true}
	top, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNS, IsUpgrade: true, Revision: 2}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.New(apiServer.config).Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	name := ch.Name() + "/templates/storageclass.yaml"
	objs, err := decodeObjects(name, files[name])
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: %d objects, %v", name, len(objs), err)
	}
	if mode, _, _ := unstructured.NestedString(objs[0].Object, "parameters", ssdv1.ParamCacheMode); mode != "readcache" {
		t.Errorf("upgrade renders cache-mode %q over the cluster's readcache, which cannot change", mode)
	}
}
