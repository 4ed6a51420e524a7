package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// limitBindings creates namespace "ns" with a limit on its admitted bindings.
func (w *world) limitBindings(limit string) {
	w.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns",
		Annotations: map[string]string{ssdv1.AnnotationNamespaceBindingLimit: limit}}}
	if err := w.c.Create(w.ctx, ns); err != nil {
		w.t.Fatal(err)
	}
}

// TestNamespaceBindingLimit (issue 37 point 5): a namespace limited to two
// admitted bindings gets its two oldest admitted, whichever is reconciled
// first; the third waits, told which annotation holds it back, and is
// admitted once one of the others is gone (deleting bindings still count
// until their agent has detached the cache).
func TestNamespaceBindingLimit(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitBindings("2")
	for i, v := range []string{"a", "b", "c"} {
		w.volume(v, "10Gi")
		w.binding(v, "1Gi", i, nil)
	}
	w.wantPending("c", ssdv1.ReasonNamespaceBindingLimit,
		"namespace ns may have 2 bindings admitted (annotation "+ssdv1.AnnotationNamespaceBindingLimit+"); 0 are and 2 are kept for older pending ones")
	w.wantAdmitted("b", 1<<30)
	w.wantAdmitted("a", 1<<30)
	w.wantPending("c", ssdv1.ReasonNamespaceBindingLimit, "namespace ns may have 2 bindings admitted", "2 are, so this one waits")
	// a is deleted and its agent detached the cache and released it.
	a := w.get("a")
	a.Finalizers = nil
	if err := w.c.Update(w.ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Delete(w.ctx, a); err != nil {
		t.Fatal(err)
	}
	w.wantAdmitted("c", 1<<30)
}

// TestNamespaceBindingLimitUnderInformerLag: the cache does not show the
// older binding's admission yet; the newer one must not take the one place.
func TestNamespaceBindingLimitUnderInformerLag(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitBindings("1")
	w.volume("a", "10Gi")
	w.volume("b", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	w.binding("b", "1Gi", 1, nil)
	before := w.get("a").Status
	w.wantAdmitted("a", 1<<30)
	w.lagging(map[string]ssdv1.CacheBindingStatus{"a": before}).wantPending("b", ssdv1.ReasonNamespaceBindingLimit,
		"0 are and 1 are kept for older pending ones")
}

// TestNamespaceBindingLimitNotANumber: a limit the controller cannot read
// holds the namespace's bindings back and says what it wants.
func TestNamespaceBindingLimitNotANumber(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitBindings("lots")
	w.volume("a", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	w.wantPending("a", ssdv1.ReasonNamespaceBindingLimit,
		`annotation `+ssdv1.AnnotationNamespaceBindingLimit+`="lots"; want a whole number of bindings such as 50`)
}
