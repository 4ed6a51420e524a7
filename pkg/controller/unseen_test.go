package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// rendezvous holds every status write until want of them are on their way at
// once, as the API server's round trips overlap when nothing serialises them.
// If they do not all arrive within a few seconds, the writes were serialised:
// it lets them through and says so.
type rendezvous struct {
	want int
	mu   sync.Mutex
	came int
	all  chan struct{}
	once sync.Once
	late bool
	met  int // how many had come when the first gave up waiting
}

func newRendezvous(want int) *rendezvous { return &rendezvous{want: want, all: make(chan struct{})} }

func (r *rendezvous) arrive() {
	r.mu.Lock()
	r.came++
	if r.came == r.want {
		r.once.Do(func() { close(r.all) })
	}
	r.mu.Unlock()
	select {
	case <-r.all:
	case <-time.After(3 * time.Second):
		r.mu.Lock()
		if !r.late {
			r.late, r.met = true, r.came
		}
		r.mu.Unlock()
		r.once.Do(func() { close(r.all) })
	}
}

type rendezvousClient struct {
	client.Client
	r *rendezvous
}

func (c rendezvousClient) Status() client.SubResourceWriter {
	return rendezvousWriter{c.Client.Status(), c.r}
}

type rendezvousWriter struct {
	client.SubResourceWriter
	r *rendezvous
}

func (w rendezvousWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.r.arrive()
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// TestAdmissionsDoNotWaitForEachOthersStatusWrite (issue 37): ten bindings of
// 1Gi on one node of 5Gi, reconciled by ten workers at once. Their decisions
// share the node's lock, their status writes must not: all ten writes are on
// their way together (they used to hold the lock over the write, so a burst
// on one node took a write's round trip per binding, with every worker
// waiting on that node). The five oldest are admitted whatever the order,
// and the node is not overcommitted.
func TestAdmissionsDoNotWaitForEachOthersStatusWrite(t *testing.T) {
	w := newWorld(t, 5<<30)
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprintf("b%02d", i)
		w.volume(names[i], "10Gi")
		w.binding(names[i], "1Gi", i, nil)
	}
	meet := newRendezvous(len(names))
	r := NewBindingReconciler(rendezvousClient{w.c, meet}, w.c, &events.FakeRecorder{}, Options{})
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			if _, err := r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if meet.late {
		t.Errorf("only %d of %d status writes were on their way at once: the writes were serialised", meet.met, len(names))
	}
	w.checkWithinCapacity(5 << 30)
	for i, name := range names {
		if admitted := w.get(name).Status.NodeName == testNode; admitted != (i < 5) {
			t.Errorf("%s (age %d): admitted %v, want the five oldest admitted", name, i, admitted)
		}
	}
}

// staleCache is the manager's cache before the watch events of some writes
// arrived: it shows the bindings in stale as they were copied, resourceVersion
// included, while writes reach the API server (the fake).
type staleCache struct {
	client.Client
	stale map[string]*ssdv1.CacheBinding // by name, in namespace "ns"
}

func (s staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if old, ok := s.stale[key.Name]; ok && key.Namespace == "ns" {
		if b, ok := obj.(*ssdv1.CacheBinding); ok {
			old.DeepCopyInto(b)
			return nil
		}
	}
	return s.Client.Get(ctx, key, obj, opts...)
}

func (s staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if bl, ok := list.(*ssdv1.CacheBindingList); ok {
		for i := range bl.Items {
			if old, ok := s.stale[bl.Items[i].Name]; ok && bl.Items[i].Namespace == "ns" {
				old.DeepCopyInto(&bl.Items[i])
			}
		}
	}
	return nil
}

// TestAdmissionCountsItsWriteTheCacheDoesNotShow: b is admitted with the
// node's whole 10Gi while the older a waits for its PVC; the PVC appears
// before the cache shows b's admission. The older pending bindings'
// reservation does not cover this (b is younger than a), and the node has no
// API server confirmation: a used to be admitted beside b, 20Gi on 10Gi. The
// controller's own record of b's write keeps b's room, and b itself, stale
// in the cache, is not decided again.
func TestAdmissionCountsItsWriteTheCacheDoesNotShow(t *testing.T) {
	w := newWorld(t, 10<<30)
	w.volume("b", "100Gi")
	w.binding("a", "10Gi", 0, nil)
	w.binding("b", "10Gi", 1, nil)
	cache := staleCache{Client: w.c, stale: map[string]*ssdv1.CacheBinding{}}
	w.r = NewBindingReconciler(cache, w.c, &events.FakeRecorder{}, Options{})
	w.wantPending("a", ssdv1.ReasonPVCNotFound)
	before := w.get("b")
	w.wantAdmitted("b", 10<<30)
	cache.stale["b"] = before
	w.volume("a", "100Gi")
	w.wantPending("a", ssdv1.ReasonInsufficientCache)
	w.checkWithinCapacity(10 << 30)

	written := w.get("b").ResourceVersion
	if _, err := w.r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	if got := w.get("b").ResourceVersion; got != written {
		t.Errorf("b was written again (resourceVersion %s, was %s) from a cache that does not show its admission", got, written)
	}
	delete(cache.stale, "b")
	w.wantPending("a", ssdv1.ReasonInsufficientCache)
	w.wantAdmitted("b", 10<<30)
	if len(w.r.unseen.m) != 0 {
		t.Errorf("records %v; want none once the cache shows the writes", w.r.unseen.m)
	}
}

// conflictingStatus fails every status write, as a write does when the node
// agent wrote the binding in between.
type conflictingStatus struct{ client.Client }

func (c conflictingStatus) Status() client.SubResourceWriter {
	return conflictingWriter{c.Client.Status()}
}

type conflictingWriter struct{ client.SubResourceWriter }

func (conflictingWriter) Patch(_ context.Context, obj client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
	return apierrors.NewConflict(schema.GroupResource{Group: ssdv1.GroupVersion.Group, Resource: "cachebindings"}, obj.GetName(), nil)
}

// TestFailedAdmissionWakesTheNode: an admission whose status write fails took
// the node's room in the arbiter's eyes until then; its record goes and the
// pending bindings of its node are woken, or one refused meanwhile would wait
// for the resync.
func TestFailedAdmissionWakesTheNode(t *testing.T) {
	w := newWorld(t, 1<<30)
	w.volume("a", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	w.r = NewBindingReconciler(conflictingStatus{w.c}, w.c, &events.FakeRecorder{}, Options{})
	w.r.wake = make(chan event.GenericEvent, 1)
	res, err := w.r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "a"}})
	if err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("Reconcile = %+v, %v; want a retry after %s", res, err, conflictRetry)
	}
	if len(w.r.unseen.m) != 0 {
		t.Errorf("records %v after the write failed, want none", w.r.unseen.m)
	}
	select {
	case ev := <-w.r.wake:
		if b := ev.Object.(*ssdv1.CacheBinding); b.Name != "a" || b.Labels[ssdv1.LabelNode] != testNode {
			t.Errorf("woke beside %s labelled %v, want a on %s", b.Name, b.Labels, testNode)
		}
	default:
		t.Error("nothing woken after the failed admission")
	}
}
