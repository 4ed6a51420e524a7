package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// slowStatusClient widens the window between a decision and its status write,
// as a busy API server does: without the arbiter's node lock, the reconciles
// running beside one another all decide on the same free room.
type slowStatusClient struct{ client.Client }

func (s slowStatusClient) Status() client.SubResourceWriter {
	return slowWriter{s.Client.Status()}
}

type slowWriter struct{ client.SubResourceWriter }

func (s slowWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	time.Sleep(20 * time.Millisecond)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// TestConcurrentResizesNeverOvercommit: ten admitted 512Mi caches on a node
// of 10Gi all ask for 2Gi at once, reconciled by 8 workers (issue 37 point 5:
// the controller runs several reconciles at once). A growth has no older
// pending binding to reserve for it: only the node's lock keeps two workers
// from granting the same free room, so the node never holds more than its
// capacity and exactly three grow.
func TestConcurrentResizesNeverOvercommit(t *testing.T) {
	w := newWorld(t, 10<<30)
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("b%02d", i)
		w.volume(names[i], "10Gi")
		w.binding(names[i], "512Mi", i, nil)
		w.wantAdmitted(names[i], 512<<20)
		w.setSize(names[i], "2Gi")
	}
	r := NewBindingReconciler(slowStatusClient{w.c}, w.c, &events.FakeRecorder{}, Options{})
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range work {
				if _, err := r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
					errs <- err
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	w.checkWithinCapacity(10 << 30)
	grown := 0
	for _, name := range names {
		if w.get(name).Status.ResolvedSizeBytes == 2<<30 {
			grown++
		}
	}
	if grown != 3 {
		t.Errorf("%d caches grew to 2Gi, want 3 (10Gi holds 3 of 2Gi beside 7 of 512Mi)", grown)
	}
}

// TestBindingLabelledWithItsNode: the controller labels a binding with the node
// of its volume as soon as it knows it, admitted or not (a full node here), and
// puts the label back when a user changes it; the node agents select their
// bindings by it.
func TestBindingLabelledWithItsNode(t *testing.T) {
	w := newWorld(t, 1<<30)
	w.volume("a", "10Gi")
	w.volume("b", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	w.binding("b", "1Gi", 1, nil)
	w.binding("orphan", "1Gi", 2, nil) // no PVC: no node known
	for _, b := range []*ssdv1.CacheBinding{w.wantAdmitted("a", 1<<30), w.wantPending("b", ssdv1.ReasonInsufficientCache)} {
		if got := b.Labels[ssdv1.LabelNode]; got != testNode {
			t.Errorf("%s: label %s=%q, want %q", b.Name, ssdv1.LabelNode, got, testNode)
		}
	}
	if b := w.wantPending("orphan", ssdv1.ReasonPVCNotFound); b.Labels[ssdv1.LabelNode] != "" {
		t.Errorf("orphan: label %s=%q, want none while its node is unknown", ssdv1.LabelNode, b.Labels[ssdv1.LabelNode])
	}
	a := w.get("a")
	a.Labels[ssdv1.LabelNode] = "elsewhere"
	if err := w.c.Update(w.ctx, a); err != nil {
		t.Fatal(err)
	}
	if b := w.wantAdmitted("a", 1<<30); b.Labels[ssdv1.LabelNode] != testNode {
		t.Errorf("a: label %s=%q after a user changed it, want %q back", ssdv1.LabelNode, b.Labels[ssdv1.LabelNode], testNode)
	}
}

// TestPendingBesideWakesOnlyItsNode: a binding released on one node wakes the
// pending bindings of that node, not every pending binding of the cluster (a
// burst of admissions requeued all of them each time), and those of its
// namespace only when the namespace has a limit.
func TestPendingBesideWakesOnlyItsNode(t *testing.T) {
	w := newWorld(t, 1<<30)
	w.volume("a", "10Gi")
	w.volume("b", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	w.binding("b", "1Gi", 1, nil)
	w.binding("other", "1Gi", 2, nil)
	w.wantAdmitted("a", 1<<30)
	w.wantPending("b", ssdv1.ReasonInsufficientCache)
	other := w.wantPending("other", ssdv1.ReasonPVCNotFound)
	other.Labels = map[string]string{ssdv1.LabelNode: "node-2"}
	if err := w.c.Update(w.ctx, other); err != nil {
		t.Fatal(err)
	}
	got := w.r.pendingBeside(w.ctx, w.get("a"))
	if len(got) != 1 || got[0].Name != "b" {
		t.Errorf("a's release wakes %v, want only b, pending on %s", got, testNode)
	}
	w.limitNamespace("100Gi")
	got = w.r.pendingBeside(w.ctx, w.get("a"))
	names := map[string]bool{}
	for _, r := range got {
		names[r.Name] = true
	}
	if !names["b"] || !names["other"] || names["a"] {
		t.Errorf("with a namespace limit, a's release wakes %v, want b and other, the namespace's pending bindings", got)
	}
}

// TestNamespaceLimitChangedSeesTheBindingLimit: setting the binding limit
// wakes the namespace's bindings as the byte limit does.
func TestNamespaceLimitChangedSeesTheBindingLimit(t *testing.T) {
	old := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	n := old.DeepCopy()
	n.Annotations = map[string]string{ssdv1.AnnotationNamespaceBindingLimit: "5"}
	if !namespaceLimitChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}) {
		t.Error("a new binding limit does not wake the namespace's bindings")
	}
}

// TestKeyedLocksForgetReleasedKeys: the arbiter keeps no lock of a node or
// namespace nobody holds, and an exclusive lock waits for a shared one.
func TestKeyedLocksForgetReleasedKeys(t *testing.T) {
	var k keyedLocks
	release := k.lock("ns", true)
	second := k.lock("ns", true) // shared locks do not wait for each other
	got := make(chan struct{})
	go func() {
		k.lock("ns", false)()
		close(got)
	}()
	release()
	select {
	case <-got:
		t.Fatal("the exclusive lock was taken while a shared one was held")
	case <-time.After(20 * time.Millisecond):
	}
	second()
	<-got
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) != 0 {
		t.Errorf("%d locks kept after all were released", len(k.m))
	}
}
