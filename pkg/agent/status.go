package agent

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// writeStatus records an outcome: state changes at once, cache figures at
// most once per figures interval and only when they changed.
func (r *BindingReconciler) writeStatus(ctx context.Context, b *ssdv1.CacheBinding, out outcome) error {
	before := b.DeepCopy()
	st := &b.Status
	st.Phase = out.phase
	for _, c := range []*metav1.Condition{&out.ready, out.degraded, out.retried} {
		if c != nil {
			c.ObservedGeneration = b.Generation
			meta.SetStatusCondition(&st.Conditions, *c)
		}
	}
	// A retry spent for an older spec says nothing now: the spec change
	// retried by itself and allows another.
	if c := meta.FindStatusCondition(st.Conditions, ssdv1.ConditionCacheRetried); c != nil && c.ObservedGeneration < b.Generation {
		meta.RemoveStatusCondition(&st.Conditions, ssdv1.ConditionCacheRetried)
	}
	if out.phase == ssdv1.PhaseAttached || out.phase == ssdv1.PhasePaused {
		r.refreshFigures(b)
	}
	if out.warmup != nil {
		st.LastWarmup = out.warmup
	}
	// A warm-up's progress is only news while it runs.
	meta.RemoveStatusCondition(&st.Conditions, ssdv1.ConditionWarmingUp)
	if out.preload != nil {
		st.LastPreload = out.preload
	}
	if equality.Semantic.DeepEqual(before.Status, b.Status) {
		return nil
	}
	if err := r.client.Status().Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	for _, e := range out.events {
		r.recorder.Eventf(b, nil, e.kind, e.reason, e.action, "%s", e.text)
	}
	return nil
}

// refreshFigures copies the latest sample into the status when the last
// written one is old enough and something changed.
func (r *BindingReconciler) refreshFigures(b *ssdv1.CacheBinding) {
	sample, ok := r.samples.Latest(b.Status.VolumeHandle)
	if !ok {
		return
	}
	old := b.Status.Cache
	if old != nil && old.LastSampleTime != nil && r.clock.Since(old.LastSampleTime.Time) < r.figuresInterval {
		return
	}
	next := figures(sample.Status)
	if hits, misses, ok := r.samples.RecentReads(b.Status.VolumeHandle); ok && hits+misses > 0 {
		next.RecentHitRatio = ssdv1.FormatHitRatio(int64(hits), int64(misses))
	}
	if old != nil {
		cmp := *old
		cmp.LastSampleTime = nil
		if equality.Semantic.DeepEqual(cmp, next) {
			return
		}
	}
	at := metav1.NewTime(sample.Time)
	next.LastSampleTime = &at
	b.Status.Cache = &next
}

func figures(s dm.CacheStatus) ssdv1.CacheFigures {
	return ssdv1.CacheFigures{
		BlockSizeBytes: int64(s.BlockSectors * dm.SectorSize),
		UsedBlocks:     int64(s.CacheUsed),
		TotalBlocks:    int64(s.CacheTotal),
		ReadHits:       int64(s.ReadHits),
		ReadMisses:     int64(s.ReadMisses),
		HitRatio:       ssdv1.FormatHitRatio(int64(s.ReadHits), int64(s.ReadMisses)),
		Promotions:     int64(s.Promotions),
		Demotions:      int64(s.Demotions),
	}
}
