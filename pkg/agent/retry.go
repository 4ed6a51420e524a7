package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// The one automatic retry a Degraded binding gets per spec generation (a
// new cache attached without a spec change once the dropped cache's LVs are
// gone from a cache pool that misses no PV: the pool set-up removed them
// with the dead device's PV) is recorded in ssdv1.ConditionCacheRetried. It
// is written before the attach, so that neither a plugin restart nor a
// failed status write afterwards can make a second attempt; it lives in the
// API, beside the Degraded condition it is judged with, and the LVs are
// read from LVM: no state of the plugin's own survives a restart (safety
// rule 5). A spec change allows a retry again, as it retries by itself.

// ReasonCacheRetried is the Event of a Degraded binding attached again
// after the pool set-up removed its failed device's PV.
const ReasonCacheRetried = "CacheRetried"

// retryKind is what degraded decided about a Degraded binding's retry.
type retryKind int

const (
	retryNone retryKind = iota
	// retryNow: the binding's one retry of this generation is to be spent
	// (spendRetry), then the cache attached.
	retryNow
	// retryDone: the retry was spent and its cache is live; the status
	// write that should have said so failed or was cut short.
	retryDone
)

// retryOf decides whether a binding whose Degraded condition is current
// (this generation's) gets its automatic retry. A spent retry whose cache
// is live is done; a spent one whose table is linear (its attach failed, or
// a restart came between the spending and the attach) is not made again.
func (r *BindingReconciler) retryOf(ctx context.Context, b *ssdv1.CacheBinding, table dm.Table) retryKind {
	_, cached := table.Target.(dm.CacheTarget)
	if retrySpent(b) {
		if cached {
			return retryDone
		}
		return retryNone
	}
	if cached || !r.cacheLVsGone(ctx, b.Status.VolumeHandle) {
		return retryNone
	}
	return retryNow
}

// retrySpent reports whether b's status records its retry for its current
// generation.
func retrySpent(b *ssdv1.CacheBinding) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionCacheRetried)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == b.Generation
}

// cacheLVsGone reports whether a new cache of vol can be made where its
// dropped one was: the node has a cache pool, none of its VGs misses a PV
// (LVM refuses every lvcreate there), and vol has no cache LV left in them.
// A drop leaves its LVs (safety rule 4); they go with the missing PV the
// pool set-up removes, or by hand. Any doubt (an LVM error) answers no.
func (r *BindingReconciler) cacheLVsGone(ctx context.Context, vol string) bool {
	vgs := r.engine.Pools().CacheVGs
	if len(vgs) == 0 {
		return false
	}
	for _, vg := range vgs {
		if r.missingPVs(vg) > 0 {
			return false
		}
	}
	vols, err := r.engine.VolumesWithCacheLVs(ctx)
	if err != nil {
		klog.ErrorS(err, "Not retrying a Degraded binding: its cache LVs could not be listed", "volumeID", vol)
		return false
	}
	return !vols[vol]
}

// spendRetry records b's retry in its status (ssdv1.ConditionCacheRetried,
// ssdv1.ReasonRetryAttaching) before anything is attached: a failed write
// attaches nothing and leaves the retry to the next reconcile. b takes the
// written status.
func (r *BindingReconciler) spendRetry(ctx context.Context, b *ssdv1.CacheBinding) error {
	spent := b.DeepCopy()
	meta.SetStatusCondition(&spent.Status.Conditions, retryCondition(b.Generation, ssdv1.ReasonRetryAttaching,
		"the failed device's cache LVs are gone from the cache pool; attaching a new cache once, without a spec change"))
	if err := r.client.Status().Patch(ctx, spent, client.MergeFromWithOptions(b, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("record the automatic retry of binding %s/%s before attaching its cache: %w", b.Namespace, b.Name, err)
	}
	*b = *spent
	return nil
}

func retryCondition(generation int64, reason, msg string) metav1.Condition {
	c := cond(ssdv1.ConditionCacheRetried, true, reason, msg)
	c.ObservedGeneration = generation
	return c
}

// retried is the outcome of a retry whose cache is attached.
func retried(out outcome) outcome {
	c := retryCondition(0, ssdv1.ReasonRetryAttached, "a new cache was attached without a spec change after the failed device's cache LVs were removed; "+
		"no other automatic retry in this generation of the spec")
	out.retried = &c
	out.events = append(out.events, note{corev1.EventTypeNormal, ReasonCacheRetried, "Attach",
		"the failed device's cache LVs were removed from the node's cache pool (its PV taken out, or the VG made again on a new device); a new cache was attached without a spec change"})
	return out
}

// retryFailed keeps a binding whose automatic retry failed Degraded, with
// why, until its spec changes: no further automatic retry (no loop on a
// pool that keeps failing the attach).
func retryFailed(err error) outcome {
	msg := fmt.Sprintf("the cache device failed and the cache was dropped; after its cache LVs were removed from the node's cache pool, attaching a new cache failed: %v; "+
		"the volume serves every read from its origin; edit the binding's spec to try again", err)
	d := cond(ssdv1.ConditionDegraded, true, ssdv1.ReasonCacheDeviceFailed, msg)
	spent := retryCondition(0, ssdv1.ReasonRetryAttachFailed, fmt.Sprintf("attaching a new cache failed: %v; no other automatic retry in this generation of the spec", err))
	return outcome{phase: ssdv1.PhaseDegraded, degraded: &d, retried: &spent, ready: cond(ssdv1.ConditionReady, false, "AttachFailed", msg),
		events: []note{{corev1.EventTypeWarning, "AttachFailed", "Attach", msg}}}
}
