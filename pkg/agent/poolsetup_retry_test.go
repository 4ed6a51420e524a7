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

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// degradedWithRepairs is a binding whose cache the monitor dropped, on a
// node whose pool set-up tells the reconciler of repairs.
func degradedWithRepairs(t *testing.T) (*fakeNode, *BindingReconciler, client.Client, *events.FakeRecorder, *CacheRepairs) {
	t.Helper()
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(admitted(ssdv1.ModeReadCache, gib)).WithStatusSubresource(&ssdv1.CacheBinding{}).Build()
	rec := events.NewFakeRecorder(20)
	repairs := NewCacheRepairs()
	r := NewBindingReconciler(c, rec, n.engine, n.locks, n.samples, node, BindingOptions{Clock: n.clock, Metrics: n.metrics, CacheLost: n.monitor.CacheLost, Repairs: repairs})
	reconcileOnce(t, r)
	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	delete(n.dm.StatusOverride, "ssdcache-"+vol)
	reconcileOnce(t, r)
	if b := get(t, c); b.Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("after the drop: %+v", b.Status)
	}
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	return n, r, c, rec, repairs
}

// loseCacheDevice removes the dropped cache's LVs with their missing PV, as
// the pool set-up's removal does, and tells repairs.
func loseCacheDevice(t *testing.T, n *fakeNode, repairs *CacheRepairs) {
	t.Helper()
	ctx := context.Background()
	lvs, err := lvm.VolumeLVs(ctx, n.lvm, "nvme", vol)
	if err != nil || len(lvs) == 0 {
		t.Fatalf("cache LVs of the dropped cache: %v %v", lvs, err)
	}
	names := make([]string, len(lvs))
	for i, lv := range lvs {
		names[i] = lv.Name
	}
	// The fake's VG had one device: give it the one that dies.
	if err := n.lvm.ExtendVG(ctx, "nvme", []string{"/dev/disk/by-id/nvme-dead"}); err != nil {
		t.Fatal(err)
	}
	n.lvm.LosePV("nvme", "/dev/disk/by-id/nvme-dead", names...)
	if err := n.lvm.ReduceMissing(ctx, "nvme"); err != nil {
		t.Fatal(err)
	}
	repairs.add(lvs)
}

// A Degraded binding stays so while its device's PV is in the pool, and is
// attached again, once, without a spec change, after the pool set-up
// removed that PV with the dropped cache's LVs.
func TestDegradedBindingRetriedOnceAfterItsPVWasRemoved(t *testing.T) {
	n, r, c, rec, repairs := degradedWithRepairs(t)
	reconcileOnce(t, r)
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" || get(t, c).Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("retried before the pool lost the failed device: table %q, %+v", tbl, get(t, c).Status)
	}
	loseCacheDevice(t, n, repairs)
	reconcileOnce(t, r)
	b := get(t, c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	if b.Status.Phase != ssdv1.PhaseAttached || deg == nil || deg.Status != metav1.ConditionFalse {
		t.Fatalf("after the repair: %+v", b.Status)
	}
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "cache" {
		t.Fatalf("after the repair: table %q, want a cache", tbl)
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	if !strings.Contains(strings.Join(got, "\n"), "Normal "+ReasonCacheRetried) {
		t.Fatalf("events %q, want Normal %s", got, ReasonCacheRetried)
	}
	if repairs.Pending(vol) {
		t.Fatal("the repair is still pending after its retry")
	}
}

// An automatic retry whose attach fails leaves the binding Degraded with
// why, and is not tried again: the next reconciles attach nothing.
func TestDegradedBindingRetryIsBounded(t *testing.T) {
	n, r, c, rec, repairs := degradedWithRepairs(t)
	loseCacheDevice(t, n, repairs)
	n.lvm.FailOn["createlv"] = errors.New("Volume group \"nvme\" has insufficient free space")
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}}); err != nil {
		t.Fatalf("a failed automatic retry returned %v: the work queue would retry it at its own pace", err)
	}
	b := get(t, c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady)
	if b.Status.Phase != ssdv1.PhaseDegraded || deg == nil || deg.Status != metav1.ConditionTrue || ready == nil || ready.Reason != "AttachFailed" ||
		!strings.Contains(deg.Message, "insufficient free space") {
		t.Fatalf("after a failed retry: %+v", b.Status)
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning AttachFailed") {
		t.Fatalf("event %q, want Warning AttachFailed", e)
	}
	var changes []string
	n.lvm.Record = func(e string) { changes = append(changes, e) }
	for range 3 {
		reconcileOnce(t, r)
	}
	if len(changes) != 0 || get(t, c).Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("retried again: LVM %v, %+v", changes, get(t, c).Status)
	}
}
