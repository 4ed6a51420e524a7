package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
)

// A warm-up copies a volume's hot set from its HDD and can take hours on a
// large cache. While it runs, the binding's WarmingUp condition says how
// far it got; a change of the binding's spec or its deletion stops it, so
// that the change does not wait for the copy: the cache then starts cold
// and the next reconcile applies the change.

// progressReportInterval spaces the warm-up's status writes.
const progressReportInterval = 30 * time.Second

// fillStop is closed, once, to stop the fill of the reconcile holding the
// volume's lock.
type fillStop struct {
	once sync.Once
	ch   chan struct{}
}

func newFillStop() *fillStop { return &fillStop{ch: make(chan struct{})} }

func (s *fillStop) stop() { s.once.Do(func() { close(s.ch) }) }

// fillControl is the cache.FillControl of b's reconcile.
func (r *BindingReconciler) fillControl(ctx context.Context, b *ssdv1.CacheBinding, stop *fillStop) cache.FillControl {
	var last time.Time
	return cache.FillControl{Stop: stop.ch, Progress: func(copied, total uint64) {
		if now := r.clock.Now(); copied < total && now.Sub(last) >= progressReportInterval {
			last = now
			r.reportWarmupProgress(ctx, b, copied, total)
		}
	}}
}

// reportWarmupProgress sets b's WarmingUp condition to the bytes copied so
// far. A failed write only loses this report.
func (r *BindingReconciler) reportWarmupProgress(ctx context.Context, b *ssdv1.CacheBinding, copied, total uint64) {
	before := b.DeepCopy()
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: ssdv1.ConditionWarmingUp, Status: metav1.ConditionTrue, Reason: ssdv1.ReasonCopyingHotSet, ObservedGeneration: b.Generation,
		Message: fmt.Sprintf("copied %s of %s of the volume's hot set from its origin (%d%%)",
			bytesText(copied), bytesText(total), copied*100/max(total, 1)),
	})
	// The lock keeps a stale copy from undoing another writer's conditions.
	if err := r.client.Status().Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		klog.V(2).InfoS("Could not report the warm-up's progress", "binding", klog.KObj(b), "err", err)
	}
}

func bytesText(n uint64) string {
	return resource.NewQuantity(int64(min(n, 1<<62)), resource.BinarySI).String()
}

// stopFillOnChange asks the reconcile holding a binding's volume to stop
// its fill when the binding's spec changes or it is being deleted: the
// reconcile of the change waits for that one, which would otherwise wait
// for the copy.
func (r *BindingReconciler) stopFillOnChange() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*ssdv1.CacheBinding)
		n, okNew := e.ObjectNew.(*ssdv1.CacheBinding)
		if okOld && okNew && n.Status.VolumeHandle != "" &&
			(o.Generation != n.Generation || (o.DeletionTimestamp.IsZero() && !n.DeletionTimestamp.IsZero())) {
			r.locks.Yield(n.Status.VolumeHandle)
		}
		return true
	}}
}
