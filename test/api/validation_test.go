package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestExamplesAreAccepted applies every object of deploy/examples with strict field
// validation, so a typo in an example fails here rather than in a user's cluster.
func TestExamplesAreAccepted(t *testing.T) {
	ctx, c := needAPIServer(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	ns := newNamespace(t, ctx, c)
	for _, f := range files {
		for i, obj := range readObjects(t, f) {
			if obj.GetNamespace() != "" {
				obj.SetNamespace(ns) // the examples name "default"; keep tests isolated
			}
			if err := c.Create(ctx, obj, client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s, object %d (%s %s): refused: %v", filepath.Base(f), i, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

func bindingObject(ns, name string, spec map[string]any) *unstructured.Unstructured {
	obj := map[string]any{
		"apiVersion": "ssdcache.io/v1alpha1",
		"kind":       "CacheBinding",
		"metadata":   map[string]any{"name": name, "namespace": ns},
	}
	if spec != nil {
		obj["spec"] = spec
	}
	return &unstructured.Unstructured{Object: obj}
}

// refusedCreate is a malformed CacheBinding and the message the API server must give.
type refusedCreate struct {
	name string
	spec map[string]any // nil: no spec at all
	want string
}

func malformedBindings() []refusedCreate {
	valid := func(override map[string]any) map[string]any {
		spec := map[string]any{"pvcName": "data", "size": "10Gi"}
		for k, v := range override {
			if v == nil {
				delete(spec, k)
			} else {
				spec[k] = v
			}
		}
		return spec
	}
	return []refusedCreate{
		{"no spec", nil, `spec: Required value`},
		{"no pvcName", valid(map[string]any{"pvcName": nil}), `spec.pvcName: Required value`},
		{"empty pvcName", valid(map[string]any{"pvcName": ""}), `spec.pvcName in body should be at least 1 chars long`},
		{"pvcName with capitals", valid(map[string]any{"pvcName": "My_Data"}), `pvcName must be a lowercase DNS subdomain name`},
		{"pvcName too long", valid(map[string]any{"pvcName": strings.Repeat("a", 254)}), `spec.pvcName: Too long: may not be more than 253 bytes`},
		{"no size", valid(map[string]any{"size": nil}), `spec.size: Required value`},
		{"size not a quantity", valid(map[string]any{"size": "ten gigs"}), `size must be a quantity such as 10Gi or a percentage of the volume such as 10%`},
		{"size with a byte unit", valid(map[string]any{"size": "10GB"}), `size must be a quantity such as 10Gi or a percentage of the volume such as 10%`},
		{"size zero percent", valid(map[string]any{"size": "0%"}), `size as a percentage must be a whole number from 1% to 100%`},
		{"size over 100 percent", valid(map[string]any{"size": "150%"}), `size as a percentage must be a whole number from 1% to 100%`},
		{"size fractional percent", valid(map[string]any{"size": "12.5%"}), `size as a percentage must be a whole number from 1% to 100%`},
		{"size fractional bytes", valid(map[string]any{"size": "1.5"}), `size must be a whole number of bytes`},
		{"size zero", valid(map[string]any{"size": "0"}), `size must be at least 16Mi`},
		{"size negative", valid(map[string]any{"size": "-1Gi"}), `size must be at least 16Mi`},
		{"size too small", valid(map[string]any{"size": "1Mi"}), `size must be at least 16Mi`},
		{"size too long", valid(map[string]any{"size": strings.Repeat("1", 33)}), `spec.size: Too long: may not be more than 32 bytes`},
		{"size a number", valid(map[string]any{"size": int64(1 << 30)}), `spec.size: Invalid value: "integer": spec.size in body must be of type string`},
		{"mode writeback", valid(map[string]any{"mode": "WriteBack"}), `spec.mode: Unsupported value: "WriteBack": supported values: "ReadCache", "Paused"`},
		{"mode lowercase", valid(map[string]any{"mode": "readcache"}), `spec.mode: Unsupported value: "readcache"`},
		{"warmup unknown", valid(map[string]any{"warmup": "Eager"}), `spec.warmup: Unsupported value: "Eager": supported values: "None", "HotSet"`},
		{"deviceClass with capitals", valid(map[string]any{"deviceClass": "NVMe"}), `spec.deviceClass in body should match`},
		{"deviceClass too long", valid(map[string]any{"deviceClass": strings.Repeat("a", 64)}), `spec.deviceClass: Too long: may not be more than 63 bytes`},
		{"size exponent of three digits", valid(map[string]any{"size": "16777216e4294967296"}), `size: an exponent may have at most two digits`},
		{"preloadPaths absolute", valid(map[string]any{"preloadPaths": []any{"models", "/etc/shadow"}}), `preloadPaths: each path is relative to the volume's root (no leading /) and has no .. component`},
		{"preloadPaths leaving the volume", valid(map[string]any{"preloadPaths": []any{"data/../../x"}}), `preloadPaths: each path is relative to the volume's root`},
		{"preloadPaths dot-dot alone", valid(map[string]any{"preloadPaths": []any{".."}}), `preloadPaths: each path is relative to the volume's root`},
		{"preloadPaths empty path", valid(map[string]any{"preloadPaths": []any{""}}), `spec.preloadPaths[0] in body should be at least 1 chars long`},
		{"preloadPaths too many", valid(map[string]any{"preloadPaths": manyPaths(33)}), `spec.preloadPaths: Too many: 33: must have at most 32 items`},
		{"unknown spec field", valid(map[string]any{"sizee": "10Gi"}), `unknown field "spec.sizee"`},
	}
}

func manyPaths(n int) []any {
	paths := make([]any, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("data/%d", i)
	}
	return paths
}

func TestMalformedBindingsAreRefused(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	for i, tc := range malformedBindings() {
		t.Run(tc.name, func(t *testing.T) {
			obj := bindingObject(ns, "bad-"+strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")), tc.spec)
			err := c.Create(ctx, obj, client.FieldValidation("Strict"))
			if err == nil {
				t.Fatalf("case %d: accepted, want refusal with %q", i, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with\n  %v\nwant a message containing\n  %s", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestMalformedUpdatesAreRefused covers rules that only apply to changes of an
// existing binding and to the status the controller and node agents write.
func TestMalformedUpdatesAreRefused(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	if err := c.Create(ctx, bindingObject(ns, "good", map[string]any{"pvcName": "data", "size": "10%"})); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, patch string
		status      bool
		want        string
	}{
		{"pvcName changed", `{"spec":{"pvcName":"other"}}`, false, `pvcName is immutable; delete this binding and create another to cache a different PVC`},
		{"size invalid on update", `{"spec":{"size":"200%"}}`, false, `size as a percentage must be a whole number from 1% to 100%`},
		{"unknown phase", `{"status":{"phase":"Exploded"}}`, true, `status.phase: Unsupported value: "Exploded"`},
		{"hit ratio as a fraction", `{"status":{"cache":{"hitRatio":"0.875"}}}`, true, `status.cache.hitRatio: Invalid value: "0.875": cache.hitRatio in body should match`},
		{"negative counter", `{"status":{"cache":{"readHits":-1}}}`, true, `status.cache.readHits: Invalid value: -1: cache.readHits in body should be greater than or equal to 0`},
		{"condition without reason", `{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z","message":"x"}]}}`, true, `status.conditions[0].reason: Required value`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := bindingObject(ns, "good", nil)
			patch := client.RawPatch(types.MergePatchType, []byte(tc.patch))
			var err error
			if tc.status {
				err = c.Status().Patch(ctx, obj, patch)
			} else {
				err = c.Patch(ctx, obj, patch)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("patch %s: got %v, want a refusal containing %q", tc.patch, err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestPrinterColumns checks what `kubectl get cachebindings` shows.
func TestPrinterColumns(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "100000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	createBinding(t, ctx, c, ns, "shown", "data", "20Gi")
	waitAdmitted(t, c, ns, "shown", node, 20<<30)
	// What the node agent writes after sampling dm-cache.
	status := `{"status":{"cache":{"hitRatio":"87.5%","recentHitRatio":"99.5%","readHits":7,"readMisses":1}}}`
	if err := c.Status().Patch(ctx, bindingObject(ns, "shown", nil), client.RawPatch(types.MergePatchType, []byte(status))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "kubectl get cachebindings", func(context.Context) error {
		return checkKubectlGet(ns, node)
	})
}

func checkKubectlGet(ns, node string) error {
	stdout, stderr, err := shared.env.ControlPlane.KubeCtl().Run("get", "cachebindings", "-n", ns)
	if err != nil {
		msg, _ := io.ReadAll(stderr)
		return fmt.Errorf("kubectl: %v: %s", err, msg)
	}
	out, _ := io.ReadAll(stdout)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	wantHeader := []string{"NAME", "PVC", "NODE", "SIZE", "MODE", "PHASE", "HIT%", "READY", "REASON", "AGE"}
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != strings.Join(wantHeader, " ") {
		return fmt.Errorf("output\n%s\nwant header %v and one row", out, wantHeader)
	}
	// Admitted, and READY False until a node agent attaches the cache (none runs
	// here), waiting for it; HIT% is the recent ratio, not the since-attach one.
	want := []string{"shown", "data", node, "20Gi", "ReadCache", "Admitted", "99.5%", "False", "Attaching"}
	row := strings.Fields(lines[1])
	if len(row) != 10 || strings.Join(row[:9], " ") != strings.Join(want, " ") {
		return fmt.Errorf("row %q, want %v followed by the age", lines[1], want)
	}
	return nil
}

// TestHitRatioFormatAccepted: whatever ssdv1.FormatHitRatio writes, the CRD accepts.
func TestHitRatioFormatAccepted(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	if err := c.Create(ctx, bindingObject(ns, "ratio", map[string]any{"pvcName": "data", "size": "1Gi"})); err != nil {
		t.Fatal(err)
	}
	for _, hm := range [][2]int64{{0, 0}, {0, 5}, {1, 2}, {7, 1}, {999, 1}, {5, 0}, {1 << 40, 3}} {
		ratio := ssdv1.FormatHitRatio(hm[0], hm[1])
		patch := fmt.Sprintf(`{"status":{"cache":{"hitRatio":%q,"recentHitRatio":%q}}}`, ratio, ratio)
		if err := c.Status().Patch(ctx, bindingObject(ns, "ratio", nil), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Errorf("hitRatio %q (hits %d, misses %d) refused: %v", ratio, hm[0], hm[1], err)
		}
	}
}
