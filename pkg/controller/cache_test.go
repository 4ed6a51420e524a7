package controller

import (
	"slices"
	"testing"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestTrimmedCacheKeepsPreloadPaths: the controller caches bindings without
// spec.preloadPaths (CacheOptions); the patches it writes from such a copy,
// the finalizer and node label and then the admission, must leave the
// paths on the API server.
func TestTrimmedCacheKeepsPreloadPaths(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.volume("a", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	paths := []string{"models/big.bin", "index"}
	b := w.get("a")
	b.Finalizers, b.Spec.PreloadPaths = nil, paths
	if err := w.c.Update(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	b = w.get("a")
	trimmed, err := trimBinding(b)
	if err != nil || len(trimmed.(*ssdv1.CacheBinding).Spec.PreloadPaths) != 0 {
		t.Fatalf("trimBinding kept %v (%v)", trimmed.(*ssdv1.CacheBinding).Spec.PreloadPaths, err)
	}
	if err := w.r.ensureMeta(w.ctx, b, testNode); err != nil {
		t.Fatal(err)
	}
	d, err := w.r.decide(w.ctx, b)
	if err != nil || !d.admit {
		t.Fatalf("decision %+v, %v; want admitted", d, err)
	}
	if _, err := w.r.applyDecision(w.ctx, b, d); err != nil {
		t.Fatal(err)
	}
	got := w.get("a")
	if !slices.Equal(got.Spec.PreloadPaths, paths) || got.Status.NodeName != testNode || got.Labels[ssdv1.LabelNode] != testNode {
		t.Errorf("after the controller's patches: preloadPaths %v, node %q, label %q; want %v kept, admitted and labelled",
			got.Spec.PreloadPaths, got.Status.NodeName, got.Labels[ssdv1.LabelNode], paths)
	}
}
