package api

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1/sizecases"
)

// TestSizeGrammarMatchesTheCRD feeds every string of the shared size table to
// the real API server (a dry-run create of a binding) and to ParseCacheSize:
// both must accept or both refuse. A StorageClass size the parser accepts but
// the CRD refuses would provision volumes whose bindings are refused forever.
func TestSizeGrammarMatchesTheCRD(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	cases, err := sizecases.All()
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-36s %-8s %-8s %s\n", "size", "CRD", "parser", "parser's reason")
	for i, tc := range cases {
		obj := bindingObject(ns, fmt.Sprintf("size-%d", i), map[string]any{"pvcName": "data", "size": tc.Size})
		crdErr := c.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
		_, parseErr := ssdv1.ParseCacheSize(tc.Size)
		fmt.Fprintf(&table, "%-36q %-8s %-8s %s\n", tc.Size, verdict(crdErr), verdict(parseErr), errText(parseErr))
		if (crdErr == nil) != (parseErr == nil) {
			t.Errorf("size %q: the CRD says %v, ParseCacheSize says %v", tc.Size, orAccepted(crdErr), orAccepted(parseErr))
		}
	}
	t.Logf("verdicts:\n%s", table.String())
}

func verdict(err error) string {
	if err != nil {
		return "refused"
	}
	return "accepted"
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func orAccepted(err error) any {
	if err == nil {
		return "accepted"
	}
	return err
}

// TestExampleStorageClassesParse reads every ssdcache StorageClass of
// deploy/examples with the parser CreateVolume and the controller use.
func TestExampleStorageClassesParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "examples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	classes := 0
	for _, f := range files {
		for _, obj := range readObjects(t, f) {
			if obj.GetKind() != "StorageClass" {
				continue
			}
			classes++
			params, _, _ := unstructured.NestedStringMap(obj.Object, "parameters")
			if _, err := ssdv1.ParseCacheParameters(params); err != nil {
				t.Errorf("%s: StorageClass %s: %v", filepath.Base(f), obj.GetName(), err)
			}
		}
	}
	if classes == 0 {
		t.Fatal("no StorageClass among the examples")
	}
}

// TestAcceptedSizesEndAdmitted: every size the table accepts, on a binding of
// its own volume, ends admitted with the size capped at the volume's, and an
// Admitted Event; the ones at the int64 edge included.
func TestAcceptedSizesEndAdmitted(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000000")
	cases, err := sizecases.All()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i, tc := range cases {
		if tc.Refused != "" {
			continue
		}
		name := fmt.Sprintf("size-%d", i)
		createVolume(t, ctx, c, ns, volume{pvc: name, node: node})
		createBinding(t, ctx, c, ns, name, name, tc.Size)
		size, _ := ssdv1.ParseCacheSize(tc.Size)
		if want[name], _, err = size.ResolveCapped(100 << 30); err != nil {
			t.Fatalf("size %q: %v", tc.Size, err)
		}
	}
	for name, bytes := range want {
		waitAdmitted(t, c, ns, name, node, bytes)
		waitEvent(t, c, ns, "CacheBinding", name, ssdv1.ReasonAdmitted, fmt.Sprintf("with %d bytes", bytes))
	}
}

// TestWarmupLimitGrammarMatchesTheCRD: the CRD's rules on spec.warmupLimit
// and ParseWarmupLimit, which the node agent reads it with, agree on every
// string, at the int64 edges and with exponents, fractions, signs and units.
func TestWarmupLimitGrammarMatchesTheCRD(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	limits := []string{"0", "1", "2Gi", "1536Mi", "1.5Gi", "-1", "+1Gi", "007", "1e3", "1E18", "9e18", "1e19", "1e100",
		"16777216e4294967296", "9223372036854775807", "9223372036854775808", "8Ei", "7Ei", "100m", "1k", "1K", "0.0", "lots", " 1Gi",
		strings.Repeat("9", 33)}
	for i, limit := range limits {
		obj := bindingObject(ns, fmt.Sprintf("limit-%d", i), map[string]any{"pvcName": "data", "size": "10Gi", "warmupLimit": limit})
		crdErr := c.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
		n, _, parseErr := ssdv1.ParseWarmupLimit(limit)
		t.Logf("%-24q CRD %-8s parser %-8s %d %s", limit, verdict(crdErr), verdict(parseErr), n, errText(parseErr))
		if (crdErr == nil) != (parseErr == nil) {
			t.Errorf("warmupLimit %q: the CRD says %v, ParseWarmupLimit says %v", limit, orAccepted(crdErr), orAccepted(parseErr))
		}
	}
}

// TestSpecChangesOnAnAdmittedBinding changes the size of an admitted binding
// to hostile and edge values one after another: every change the API server
// accepts ends in a sane state (resized and a Resized Event, or kept at the
// old size with an InsufficientCache Event when the node lacks room), sizes
// past the volume's being capped at it; every change it refuses leaves the
// binding as it was.
func TestSpecChangesOnAnAdmittedBinding(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, fmt.Sprint(int64(60<<30)))
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node}) // 100Gi
	createBinding(t, ctx, c, ns, "cb", "data", "10Gi")
	size := int64(10 << 30)
	waitAdmitted(t, c, ns, "cb", node, size)
	patch := func(s string) error {
		return c.Patch(ctx, bindingObject(ns, "cb", nil), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":"`+s+`"}}`)))
	}
	steps := []struct {
		size    string
		resized int64 // 0: the node lacks room; the binding keeps its size
	}{
		{"20Gi", 20 << 30},
		{"92233720368547758e2", 0}, // capped at the volume's 100Gi: more than the node has
		{"50%", 50 << 30},
		{"0016Mi", 16 << 20},
		{"+32Mi", 32 << 20},
		{"1e10", 10_000_000_000},
		{"9223372036854775k", 0},
		{"60Gi", 60 << 30},
	}
	for _, s := range steps {
		if err := patch(s.size); err != nil {
			t.Fatalf("size %q refused: %v", s.size, err)
		}
		if s.resized == 0 {
			waitEvent(t, c, ns, "CacheBinding", "cb", ssdv1.ReasonInsufficientCache, "")
			waitAdmitted(t, c, ns, "cb", node, size)
			t.Logf("size %q: kept at %d bytes, InsufficientCache", s.size, size)
			continue
		}
		size = s.resized
		waitAdmitted(t, c, ns, "cb", node, size)
		waitEvent(t, c, ns, "CacheBinding", "cb", "Resized", fmt.Sprintf("cache size is now %d bytes", size))
		t.Logf("size %q: resized to %d bytes", s.size, size)
	}
	for _, bad := range []string{"1.5Gi", "-1Gi", "0%", "101%", "1e100", "15Mi", "", "10GB"} {
		if err := patch(bad); err == nil {
			t.Fatalf("size %q accepted on an admitted binding", bad)
		}
		b := waitAdmitted(t, c, ns, "cb", node, size)
		if b.Spec.Size != "60Gi" {
			t.Fatalf("size %q: spec.size is %q after the refusal", bad, b.Spec.Size)
		}
	}
}
