package agent

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
)

// The agent keeps nothing in memory that a restart could lose: each case
// attaches with one agent and goes on with a new one (new reconciler, new
// samples, as after a plugin restart) over the same kernel, LVM and API.

func (n *fakeNode) restarted(c client.Client) (*BindingReconciler, *events.FakeRecorder) {
	n.samples = NewSamples()
	n.monitor = NewMonitor(n.engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	rec := events.NewFakeRecorder(10)
	return NewBindingReconciler(c, rec, n.engine, n.locks, n.samples, node, BindingOptions{Clock: n.clock}), rec
}

func (n *fakeNode) tableType(t *testing.T) string {
	t.Helper()
	tbl, err := n.dm.Table(context.Background(), "ssdcache-"+vol)
	if err != nil {
		t.Fatal(err)
	}
	return tbl.Target.Type()
}

// revoke clears the binding's admission, as the controller does when its PVC
// or node goes away.
func revoke(t *testing.T, c client.Client) {
	t.Helper()
	b := get(t, c)
	b.Status.NodeName, b.Status.VolumeHandle, b.Status.Phase = "", "", ssdv1.PhasePending
	if err := c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// deleteWithoutAgent deletes the binding with its finalizer stripped, as an
// admin may while the agent is down: the agent never sees it being deleted.
func deleteWithoutAgent(t *testing.T, c client.Client) {
	t.Helper()
	b := get(t, c)
	b.Finalizers = nil
	if err := c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func TestRestartedAgentDetachesRevokedCache(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	binding := admitted(ssdv1.ModeReadCache, gib)
	binding.UID = "uid-1"
	r, c, _ := n.reconciler(t, binding)
	reconcileOnce(t, r)
	st, _ := n.engine.Inspect(context.Background(), vol)
	if st.Spec.Owner != "ns/b/uid-1" {
		t.Fatalf("cache LVs owned by %q, want ns/b/uid-1", st.Spec.Owner)
	}
	revoke(t, c) // while the plugin was down
	r, rec := n.restarted(c)
	reconcileOnce(t, r)
	if got := n.tableType(t); got != "linear" {
		t.Fatalf("restarted agent kept a revoked cache: table %s", got)
	}
	if e := <-rec.Events; !strings.Contains(e, "CacheDetached") || !strings.Contains(e, "no longer admitted") {
		t.Fatalf("event %q, want CacheDetached on the binding", e)
	}
}

func TestRestartedAgentDetachesCacheOfDeletedBinding(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	deleteWithoutAgent(t, c) // while the plugin was down
	r, _ = n.restarted(c)
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.tableType(t); got != "linear" {
		t.Fatalf("cache of a deleted binding kept: table %s", got)
	}
}

func TestRestartedAgentKeepsDroppedCacheDropped(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	delete(n.dm.StatusOverride, "ssdcache-"+vol)
	reconcileOnce(t, r) // Degraded is written

	r, rec := n.restarted(c)
	reconcileOnce(t, r)
	b := get(t, c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	if got := n.tableType(t); got != "linear" || b.Status.Phase != ssdv1.PhaseDegraded || deg == nil || deg.Status != metav1.ConditionTrue {
		t.Fatalf("restarted agent: table %s, phase %s, degraded %+v; want the failed cache kept dropped", got, b.Status.Phase, deg)
	}
	select {
	case e := <-rec.Events:
		t.Fatalf("restarted agent repeated an event: %q", e)
	default:
	}
	b.Generation = 2 // the user edits the spec to ask for another try
	if err := c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if got := n.tableType(t); got != "cache" || get(t, c).Status.Phase != ssdv1.PhaseAttached {
		t.Fatalf("after a spec change: table %s, phase %s; want attached again", got, get(t, c).Status.Phase)
	}
}

// A cache that no binding admitted here claims (one NodeStage attached
// before the agent owned every cache) is detached; a claimed one is kept.
func TestUnclaimedCacheDetachedClaimedKept(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	other := admitted(ssdv1.ModeReadCache, gib)
	other.Status.VolumeHandle = "pvc-other"
	r, c, _ := n.reconciler(t, other)
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.tableType(t); got != "linear" {
		t.Fatalf("unclaimed cache kept: table %s", got)
	}
	if err := n.engine.Attach(context.Background(), vol, cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	b := get(t, c)
	b.Status.VolumeHandle = vol
	if err := c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.tableType(t); got != "cache" {
		t.Fatalf("claimed cache detached: table %s", got)
	}
}

// A binding deleted without the agent (its finalizer stripped) loses its
// cache at the reconcile its deletion causes, not only at the next sweep.
func TestBindingGoneWithoutAgentLosesItsCache(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	deleteWithoutAgent(t, c)
	reconcileOnce(t, r)
	if got := n.tableType(t); got != "linear" {
		t.Fatalf("cache of a vanished binding kept: table %s", got)
	}
}

// A paused cache is LVs behind a linear table: revoked while the plugin was
// down, the new agent still finds and removes them.
func TestRestartedAgentRemovesRevokedPausedCache(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModePaused, gib))
	reconcileOnce(t, r)
	if st, _ := n.engine.Inspect(context.Background(), vol); !st.HasCache || st.Cached {
		t.Fatalf("paused binding: %+v, want cache LVs behind a linear table", st)
	}
	revoke(t, c)
	r, _ = n.restarted(c)
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := n.engine.Inspect(context.Background(), vol); st.HasCache || len(st.CacheDevices) != 0 {
		t.Fatalf("a revoked paused cache kept its LVs: %+v", st)
	}
}
