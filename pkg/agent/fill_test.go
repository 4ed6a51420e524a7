package agent

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

// spreadHotSet saves a hot set of n origin blocks of 64 KiB, none next to
// another, so that a warm-up copies them in more than one part.
func spreadHotSet(t *testing.T, n *fakeNode, blocks int) {
	t.Helper()
	set := make([]uint64, blocks)
	for i := range set {
		set[i] = uint64(2 * i)
	}
	if err := n.hotSets.Save(vol, hotset.FromBlocks(set, 128)); err != nil {
		t.Fatal(err)
	}
}

// The warm-up's progress is the WarmingUp condition, which goes once the
// cache is live.
func TestWarmupProgressIsACondition(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	b := get(t, c)
	fc := r.fillControl(context.Background(), b, newFillStop())
	fc.Progress(3<<30, 12<<30)
	got := meta.FindStatusCondition(get(t, c).Status.Conditions, ssdv1.ConditionWarmingUp)
	if got == nil || got.Status != "True" || !strings.Contains(got.Message, "copied 3Gi of 12Gi") || !strings.Contains(got.Message, "(25%)") {
		t.Fatalf("WarmingUp condition %+v, want True with 3Gi of 12Gi copied", got)
	}
	fc.Progress(4<<30, 12<<30) // within progressReportInterval: not written
	if got := meta.FindStatusCondition(get(t, c).Status.Conditions, ssdv1.ConditionWarmingUp); !strings.Contains(got.Message, "3Gi") {
		t.Fatalf("a report within %v was written: %q", progressReportInterval, got.Message)
	}

	spreadHotSet(t, n, 10)
	reconcileOnce(t, r)
	if got := meta.FindStatusCondition(get(t, c).Status.Conditions, ssdv1.ConditionWarmingUp); got != nil {
		t.Fatalf("WarmingUp %+v left after the cache went live", got)
	}
}

// A change of the binding's spec stops the warm-up holding its volume:
// the update event asks the lock's holder to yield.
func TestSpecChangeStopsTheWarmUp(t *testing.T) {
	n := newNode(t)
	r, _, _ := n.reconciler(t)
	stop := newFillStop()
	if !n.locks.TryAcquireYielding(vol, stop.stop) {
		t.Fatal("lock busy")
	}
	old := admitted(ssdv1.ModeReadCache, gib)
	changed := old.DeepCopy()
	changed.Generation++
	if !r.stopFillOnChange().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: changed}) {
		t.Fatal("the predicate filtered the update out")
	}
	select {
	case <-stop.ch:
	default:
		t.Fatal("a spec change did not stop the warm-up holding the volume")
	}
}

// yieldOnCopy stands for the update event of a spec change arriving while
// the warm-up copies: its first copy asks the volume's lock holder to yield.
type yieldOnCopy struct {
	blockdev.Interface
	locks **cache.VolumeLocks
}

func (y yieldOnCopy) CopyExtents(ctx context.Context, src dm.DevNum, dst string, want dm.DevNum, extents []blockdev.Extent) error {
	err := y.Interface.CopyExtents(ctx, src, dst, want, extents)
	(*y.locks).Yield(vol)
	return err
}

// A stopped warm-up leaves the cache attached cold and says so; nothing is
// recorded as a fill.
func TestStoppedWarmUpAttachesColdAndSaysSo(t *testing.T) {
	var locks *cache.VolumeLocks
	n := newNode(t, func(l *cache.Layers) { l.Dev = yieldOnCopy{Interface: l.Dev, locks: &locks} })
	locks = n.locks
	n.stage(t, nil)
	spreadHotSet(t, n, 6000) // 375 MiB: two parts
	r, c, rec := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	b := get(t, c)
	if b.Status.LastWarmup != nil || n.tableType(t) != "cache" {
		t.Fatalf("after a stopped warm-up: lastWarmup %+v, table %s; want a cold cache attached", b.Status.LastWarmup, n.tableType(t))
	}
	var stopped bool
	for len(rec.Events) > 0 {
		stopped = stopped || strings.Contains(<-rec.Events, "CacheWarmupStopped")
	}
	if !stopped {
		t.Fatal("no CacheWarmupStopped event")
	}
}
