package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
)

// A cache on this node must be claimed by a binding admitted to this node
// for its volume; nothing else may keep one (the capacity count would not
// see it). The agent remembers nothing of what it attached: at start, on
// every resync and whenever a binding stops being admitted here, it detaches
// the caches that no binding claims, read from the kernel's tables and the
// API alone. A binding being deleted still claims its cache: its own
// reconcile detaches it and removes the finalizer.

// DetachUnclaimed detaches every unclaimed cache of this node. A volume
// busy with another call is left to the next sweep.
func (r *BindingReconciler) DetachUnclaimed(ctx context.Context) error {
	vols, err := r.engine.StagedVolumes(ctx)
	if err != nil {
		return err
	}
	// One LVM listing finds the paused caches (LVs behind a linear table).
	withLVs, err := r.engine.VolumesWithCacheLVs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range vols {
		if claimed, err := r.claimed(ctx, v.ID); claimed || err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, r.detachIfUnclaimed(ctx, v.ID, withLVs[v.ID]))
	}
	return errors.Join(errs...)
}

// detachIfUnclaimed checks again holding the volume's lock: a binding the
// reconciler admitted and attached meanwhile is in the cache by then.
func (r *BindingReconciler) detachIfUnclaimed(ctx context.Context, vol string, hasLVs bool) error {
	if !r.locks.TryAcquire(vol) {
		return nil
	}
	defer r.locks.Release(vol)
	if cached, err := r.engine.IsCached(ctx, vol); err != nil || (!cached && !hasLVs) {
		return err
	}
	if claimed, err := r.claimed(ctx, vol); claimed || err != nil {
		return err
	}
	st, err := r.engine.Inspect(ctx, vol)
	if err != nil {
		return err
	}
	if err := r.engine.Detach(ctx, vol); err != nil && !errors.Is(err, cache.ErrNotStaged) {
		return err
	}
	klog.InfoS("Detached a cache that no binding admitted to this node claims", "volumeID", vol, "owner", st.Spec.Owner)
	r.tellOwner(ctx, st.Spec.Owner, vol)
	return nil
}

// claimed says whether a binding admitted to this node names vol.
func (r *BindingReconciler) claimed(ctx context.Context, vol string) (bool, error) {
	var list ssdv1.CacheBindingList
	if err := r.client.List(ctx, &list); err != nil {
		return true, err // unknown: keep the cache
	}
	for _, b := range list.Items {
		if b.Status.NodeName == r.nodeName && b.Status.VolumeHandle == vol {
			return true, nil
		}
	}
	return false, nil
}

// tellOwner puts an Event on the binding an unclaimed cache was made for,
// if it still exists (same UID).
func (r *BindingReconciler) tellOwner(ctx context.Context, owner, vol string) {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return
	}
	b := &ssdv1.CacheBinding{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: parts[0], Name: parts[1]}, b); err != nil || string(b.UID) != parts[2] {
		return
	}
	r.recorder.Eventf(b, nil, corev1.EventTypeNormal, "CacheDetached", "Detach",
		"cache detached from volume %s: the binding is no longer admitted to node %s", vol, r.nodeName)
}

// unclaimedSweep runs DetachUnclaimed once the API cache has synced, then
// every interval; it is a controller-runtime Runnable.
type unclaimedSweep struct {
	r          *BindingReconciler
	interval   time.Duration
	waitSynced func(context.Context) bool
}

func (s unclaimedSweep) Start(ctx context.Context) error {
	if !s.waitSynced(ctx) {
		return nil // stopped before the cache synced
	}
	for {
		if err := s.r.DetachUnclaimed(ctx); err != nil {
			klog.ErrorS(err, "Detaching unclaimed caches")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.interval):
		}
	}
}
