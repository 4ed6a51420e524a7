package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// retryWorld is a node whose binding's cache the monitor dropped, with the
// API server's status writes failing while failStatus says so.
type retryWorld struct {
	n   *fakeNode
	c   client.Client
	rec *events.FakeRecorder
	r   *BindingReconciler
	// failStatus, when set, fails the status writes it returns true for.
	failStatus func(obj client.Object) bool
}

func newRetryWorld(t *testing.T) *retryWorld {
	t.Helper()
	w := &retryWorld{n: newNode(t), rec: events.NewFakeRecorder(20)}
	w.n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	server := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(admitted(ssdv1.ModeReadCache, gib)).WithStatusSubresource(&ssdv1.CacheBinding{}).Build()
	w.c = interceptor.NewClient(server, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if w.failStatus != nil && w.failStatus(obj) {
				return errors.New("the object has been modified; please apply your changes to the latest version and try again")
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	w.r = w.restart()
	reconcileOnce(t, w.r)
	w.n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	w.n.monitor.Tick(context.Background())
	delete(w.n.dm.StatusOverride, "ssdcache-"+vol)
	reconcileOnce(t, w.r)
	if b := get(t, w.c); b.Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("after the drop: %+v", b.Status)
	}
	w.events()
	return w
}

// restart is a binding reconciler as a restarted plugin has: nothing in
// memory of the drop but the monitor's samples, which are read only for a
// drop not yet in the status.
func (w *retryWorld) restart() *BindingReconciler {
	missing := func(vg string) uint64 {
		g, err := w.n.lvm.GetVG(context.Background(), vg)
		if err != nil {
			return 0
		}
		return g.MissingPVs
	}
	return NewBindingReconciler(w.c, w.rec, w.n.engine, w.n.locks, w.n.samples, node,
		BindingOptions{Clock: w.n.clock, Metrics: w.n.metrics, CacheLost: w.n.monitor.CacheLost, MissingPVs: missing})
}

func (w *retryWorld) events() []string {
	var got []string
	for len(w.rec.Events) > 0 {
		got = append(got, <-w.rec.Events)
	}
	return got
}

func (w *retryWorld) table(t *testing.T) string {
	t.Helper()
	tbl, err := w.n.dm.Table(context.Background(), "ssdcache-"+vol)
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Target.Type()
}

// lvmChanges records the LVM commands that change something from now on.
func (w *retryWorld) lvmChanges() *[]string {
	var changes []string
	w.n.lvm.Record = func(e string) { changes = append(changes, e) }
	return &changes
}

// loseCacheDevice removes the dropped cache's LVs with their missing PV, as
// the pool set-up's removal does.
func loseCacheDevice(t *testing.T, n *fakeNode) {
	t.Helper()
	ctx := context.Background()
	lvs, err := lvm.VolumeLVs(ctx, n.lvm, "nvme", vol)
	if err != nil || len(lvs) == 0 {
		t.Fatalf("cache LVs of the dropped cache: %v %v", lvs, err)
	}
	// The fake's VG had one device: give it the one that dies.
	if err := n.lvm.ExtendVG(ctx, "nvme", []string{"/dev/disk/by-id/nvme-dead"}); err != nil {
		t.Fatal(err)
	}
	n.lvm.LosePV("nvme", "/dev/disk/by-id/nvme-dead", lvm.Names(lvs)...)
	if err := n.lvm.ReduceMissing(ctx, "nvme"); err != nil {
		t.Fatal(err)
	}
}

func reconcileErr(r *BindingReconciler) error {
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}})
	return err
}

// wantRetried checks that the binding is attached again after its retry,
// which its status records for generation.
func wantRetried(t *testing.T, w *retryWorld, generation int64) {
	t.Helper()
	b := get(t, w.c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	spent := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionCacheRetried)
	if b.Status.Phase != ssdv1.PhaseAttached || deg == nil || deg.Status != metav1.ConditionFalse ||
		spent == nil || spent.Reason != ssdv1.ReasonRetryAttached || spent.ObservedGeneration != generation {
		t.Fatalf("after the retry: %+v", b.Status)
	}
	if got := w.table(t); got != "cache" {
		t.Fatalf("after the retry: table %s, want a cache", got)
	}
	if got := w.events(); !strings.Contains(strings.Join(got, "\n"), "Normal "+ReasonCacheRetried) {
		t.Fatalf("events %q, want Normal %s", got, ReasonCacheRetried)
	}
}

// A Degraded binding stays so while its device's PV is in the pool, and is
// attached again, once, without a spec change, after the pool set-up
// removed that PV with the dropped cache's LVs.
func TestDegradedBindingRetriedOnceAfterItsPVWasRemoved(t *testing.T) {
	w := newRetryWorld(t)
	reconcileOnce(t, w.r)
	if got := w.table(t); got != "linear" || get(t, w.c).Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("retried before the pool lost the failed device: table %s, %+v", got, get(t, w.c).Status)
	}
	loseCacheDevice(t, w.n)
	reconcileOnce(t, w.r)
	wantRetried(t, w, 1)
}

// An automatic retry whose attach fails leaves the binding Degraded with
// why, and is not tried again: the next reconciles, a restarted plugin's
// too, attach nothing.
func TestDegradedBindingRetryIsBounded(t *testing.T) {
	w := newRetryWorld(t)
	loseCacheDevice(t, w.n)
	w.n.lvm.FailOn["createlv"] = errors.New("Volume group \"nvme\" has insufficient free space")
	if err := reconcileErr(w.r); err != nil {
		t.Fatalf("a failed automatic retry returned %v: the work queue would retry it at its own pace", err)
	}
	b := get(t, w.c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady)
	spent := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionCacheRetried)
	if b.Status.Phase != ssdv1.PhaseDegraded || deg == nil || deg.Status != metav1.ConditionTrue || ready == nil || ready.Reason != "AttachFailed" ||
		!strings.Contains(deg.Message, "insufficient free space") || spent == nil || spent.Reason != ssdv1.ReasonRetryAttachFailed {
		t.Fatalf("after a failed retry: %+v", b.Status)
	}
	if e := w.events(); len(e) == 0 || !strings.HasPrefix(e[0], "Warning AttachFailed") {
		t.Fatalf("events %q, want Warning AttachFailed", e)
	}
	delete(w.n.lvm.FailOn, "createlv")
	changes := w.lvmChanges()
	for _, r := range []*BindingReconciler{w.r, w.r, w.restart()} {
		reconcileOnce(t, r)
	}
	if len(*changes) != 0 || get(t, w.c).Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("retried again: LVM %v, %+v", *changes, get(t, w.c).Status)
	}
}

// The retry needs nothing the plugin kept in memory: a plugin restarted
// after the pool set-up removed the PV retries from the binding's status and
// LVM alone, and after a second drop in the same generation of the spec,
// with the PV removed again, it does not retry: once per generation. A
// spec change attaches again and forgets the spent retry.
func TestDegradedBindingRetrySurvivesARestartOncePerGeneration(t *testing.T) {
	w := newRetryWorld(t)
	loseCacheDevice(t, w.n)
	w.r = w.restart()
	reconcileOnce(t, w.r)
	wantRetried(t, w, 1)

	w.n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	w.n.monitor.Tick(context.Background())
	delete(w.n.dm.StatusOverride, "ssdcache-"+vol)
	reconcileOnce(t, w.r)
	loseCacheDevice(t, w.n)
	changes := w.lvmChanges()
	for _, r := range []*BindingReconciler{w.r, w.restart()} {
		reconcileOnce(t, r)
	}
	if b := get(t, w.c); b.Status.Phase != ssdv1.PhaseDegraded || len(*changes) != 0 || w.table(t) != "linear" {
		t.Fatalf("a second drop in generation 1 was retried: LVM %v, %+v", *changes, b.Status)
	}

	b := get(t, w.c)
	b.Spec.Mode, b.Generation = ssdv1.ModePaused, 2
	if err := w.c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, w.r)
	b = get(t, w.c)
	if b.Status.Phase != ssdv1.PhasePaused || meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionCacheRetried) != nil {
		t.Fatalf("after a spec change: %+v", b.Status)
	}
}

// The retry is spent in the binding's status before the attach: a status
// write that fails before it attaches nothing and leaves the retry whole;
// one that fails after it leaves the new cache live, and the next reconcile
// says Attached without attaching again. Either way one attach, and the
// status never stays Degraded over a live cache.
func TestDegradedBindingRetrySurvivesAFailedStatusWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int // which status write of the retry's reconcile fails
		table string
	}{
		{"before the attach", 1, "linear"},
		{"after the attach", 2, "cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRetryWorld(t)
			loseCacheDevice(t, w.n)
			writes := 0
			w.failStatus = func(client.Object) bool { writes++; return writes == tc.fails }
			changes := w.lvmChanges()
			if err := reconcileErr(w.r); err == nil {
				t.Fatal("the failed status write was not returned for the work queue to retry")
			}
			b := get(t, w.c)
			if got := w.table(t); got != tc.table || b.Status.Phase != ssdv1.PhaseDegraded {
				t.Fatalf("after the failed write: table %s, %+v", got, b.Status)
			}
			w.failStatus = nil
			w.r = w.restart()
			reconcileOnce(t, w.r)
			wantRetried(t, w, 1)
			if n := strings.Count(strings.Join(*changes, "\n"), "createlv"); n != 2 {
				t.Fatalf("LVM %v: want one attach (a data and a metadata LV)", *changes)
			}
		})
	}
}

// A restart between the retry's record and its attach costs the retry, not
// the bound: the binding stays Degraded until its spec changes.
func TestDegradedBindingRetryRecordedButNotAttachedIsNotMadeAgain(t *testing.T) {
	w := newRetryWorld(t)
	loseCacheDevice(t, w.n)
	b := get(t, w.c)
	meta.SetStatusCondition(&b.Status.Conditions, retryCondition(b.Generation, ssdv1.ReasonRetryAttaching, "attaching"))
	if err := w.c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	changes := w.lvmChanges()
	reconcileOnce(t, w.restart())
	if b := get(t, w.c); b.Status.Phase != ssdv1.PhaseDegraded || len(*changes) != 0 || w.table(t) != "linear" {
		t.Fatalf("a recorded retry was made again: LVM %v, %+v", *changes, b.Status)
	}
}
