package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// laggingClient is the manager's cached client before the watch events of some
// status patches arrived: reads show the bindings named in stale with their old
// status, while writes reach the API server (the fake) as they do in a cluster.
type laggingClient struct {
	client.Client
	stale map[string]ssdv1.CacheBindingStatus // by binding name, in namespace "ns"
}

func (l laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := l.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if b, ok := obj.(*ssdv1.CacheBinding); ok {
		l.age(b)
	}
	return nil
}

func (l laggingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := l.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if bl, ok := list.(*ssdv1.CacheBindingList); ok {
		for i := range bl.Items {
			l.age(&bl.Items[i])
		}
	}
	return nil
}

func (l laggingClient) age(b *ssdv1.CacheBinding) {
	if st, ok := l.stale[b.Name]; ok && b.Namespace == "ns" {
		b.Status = *st.DeepCopy()
	}
}

// lagging returns the world seen by a reconciler whose cache still shows the
// bindings in stale with their old status; its uncached reader is the truth.
func (w *world) lagging(stale map[string]ssdv1.CacheBindingStatus) *world {
	lw := *w
	lw.r = NewBindingReconciler(laggingClient{Client: w.c, stale: stale}, w.c, &events.FakeRecorder{}, Options{})
	return &lw
}

// limitNamespace creates namespace "ns" with a cache limit.
func (w *world) limitNamespace(limit string) {
	w.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns",
		Annotations: map[string]string{ssdv1.AnnotationNamespaceCacheLimit: limit}}}
	if err := w.c.Create(w.ctx, ns); err != nil {
		w.t.Fatal(err)
	}
}

// checkWithinNamespaceLimit fails when the bindings admitted in "ns" take more than limit.
func (w *world) checkWithinNamespaceLimit(limit int64) {
	w.t.Helper()
	list := &ssdv1.CacheBindingList{}
	if err := w.c.List(w.ctx, list, client.InNamespace("ns")); err != nil {
		w.t.Fatal(err)
	}
	var sum float64
	for _, b := range list.Items {
		if b.Status.NodeName != "" {
			sum += float64(b.Status.ResolvedSizeBytes)
		}
	}
	if sum > float64(limit) {
		w.t.Errorf("bindings admitted in namespace ns take %.0f bytes, more than its limit of %d", sum, limit)
	}
}

// TestNamespaceLimitUnderInformerLag is issue 37's case: two 10Gi bindings in a
// namespace limited to 10Gi, the newer reconciled before the cache shows the older
// one's admission. Both used to be admitted; the older one, pending in the cache's
// eyes, now keeps its room.
func TestNamespaceLimitUnderInformerLag(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitNamespace("10Gi")
	w.volume("a", "100Gi")
	w.volume("b", "100Gi")
	w.binding("a", "10Gi", 0, nil)
	w.binding("b", "10Gi", 1, nil)
	before := w.get("a").Status
	w.wantAdmitted("a", 10<<30)
	w.lagging(map[string]ssdv1.CacheBindingStatus{"a": before}).wantPending("b", ssdv1.ReasonNamespaceCacheLimit,
		"its other bindings have 0 and 10737418240 are kept for older pending ones, this one needs 10737418240")
	w.checkWithinNamespaceLimit(10 << 30)
}

// TestNamespaceLimitOlderBindingResolvedLater: the older binding's PVC appears only
// after the newer one was admitted, and the cache does not show that admission
// yet. No reservation covers this (the newer one is no older pending binding of the
// older one), so the admitted bytes are confirmed on the API server.
func TestNamespaceLimitOlderBindingResolvedLater(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitNamespace("10Gi")
	w.volume("b", "100Gi")
	w.binding("a", "10Gi", 0, nil)
	w.binding("b", "10Gi", 1, nil)
	w.wantPending("a", ssdv1.ReasonPVCNotFound)
	before := w.get("b").Status
	w.wantAdmitted("b", 10<<30)
	w.volume("a", "100Gi")
	w.lagging(map[string]ssdv1.CacheBindingStatus{"b": before}).wantPending("a", ssdv1.ReasonNamespaceCacheLimit,
		"its other bindings have 10737418240, this one needs 10737418240")
	w.checkWithinNamespaceLimit(10 << 30)
}

// TestNamespaceLimitResizeUnderInformerLag: an admitted binding grows while the
// cache does not show another one's admission yet; the growth must not pass the limit.
func TestNamespaceLimitResizeUnderInformerLag(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitNamespace("10Gi")
	w.volume("a", "100Gi")
	w.volume("b", "100Gi")
	w.binding("a", "5Gi", 0, nil)
	w.binding("b", "4Gi", 1, nil)
	before := w.get("a").Status
	w.wantAdmitted("a", 5<<30)
	w.wantAdmitted("b", 4<<30)
	w.setSize("b", "6Gi")
	b := w.lagging(map[string]ssdv1.CacheBindingStatus{"a": before}).wantAdmitted("b", 4<<30)
	if msg := pendingMessage(b); !contains(msg, "cannot grow the cache to 6442450944 bytes", "its other bindings have 5368709120") {
		t.Errorf("b: Pending message %q, want it to say the growth is refused beside a's 5Gi", msg)
	}
	w.checkWithinNamespaceLimit(10 << 30)
}

// TestNamespaceLimitOlderPendingFirst: the namespace's room goes to its pending
// bindings oldest first, whichever is reconciled first; an older one waiting for
// its PVC, or for a device class its node lacks, keeps none, and a newer one that
// fits beside the older ones passes.
func TestNamespaceLimitOlderPendingFirst(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.limitNamespace("10Gi")
	for _, v := range []string{"a", "b", "c", "optane"} {
		w.volume(v, "100Gi")
	}
	w.binding("early", "8Gi", 0, nil) // its PVC does not exist
	w.binding("optane", "8Gi", 0, nil)
	optane := w.get("optane")
	optane.Spec.DeviceClass = "optane" // testNode's cache has no class
	if err := w.c.Update(w.ctx, optane); err != nil {
		t.Fatal(err)
	}
	w.binding("a", "8Gi", 1, nil)
	w.binding("b", "5Gi", 2, nil)
	w.binding("c", "2Gi", 3, nil)
	w.wantPending("b", ssdv1.ReasonNamespaceCacheLimit,
		"its other bindings have 0 and 8589934592 are kept for older pending ones, this one needs 5368709120")
	w.wantAdmitted("c", 2<<30)
	w.wantAdmitted("a", 8<<30)
	w.wantPending("b", ssdv1.ReasonNamespaceCacheLimit, "its other bindings have 10737418240, this one needs 5368709120")
	w.wantPending("early", ssdv1.ReasonPVCNotFound)
	w.wantPending("optane", ssdv1.ReasonDeviceClassUnavailable)
	w.checkWithinNamespaceLimit(10 << 30)
}

func contains(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
