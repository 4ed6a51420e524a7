package agent

import (
	"context"
	"errors"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// One read of the bindings for the whole sweep, not one per volume.
	claimed, err := r.claimedVolumes(ctx)
	if err != nil {
		return err // unknown: keep every cache
	}
	var errs []error
	staged := sets.New[string]()
	for _, v := range vols {
		staged.Insert(v.ID)
		if !claimed.Has(v.ID) {
			errs = append(errs, r.detachIfUnclaimed(ctx, v.ID, withLVs[v.ID]))
		}
	}
	// The cache LVs a clean unstage kept hold the node's SSD until the
	// volume is staged again, as long as a binding here claims them.
	for vol := range withLVs {
		if !staged.Has(vol) && !claimed.Has(vol) {
			errs = append(errs, r.detachIfUnclaimed(ctx, vol, true))
		}
	}
	return errors.Join(errs...)
}

// detachIfUnclaimed checks again holding the volume's lock: a binding the
// reconciler admitted and attached meanwhile is in the cache by then. The
// binding the cache was made for is last read from the API server itself,
// which also sees a binding admitted here that is not labelled with this node
// (yet): the client's cache does not hold it.
func (r *BindingReconciler) detachIfUnclaimed(ctx context.Context, vol string, hasLVs bool) error {
	if !r.locks.TryAcquire(vol) {
		return nil
	}
	defer r.locks.Release(vol)
	if cached, err := r.engine.IsCached(ctx, vol); err != nil || (!cached && !hasLVs) {
		return err
	}
	if claimed, err := r.claimedVolumes(ctx); claimed.Has(vol) || err != nil {
		return err
	}
	spec, err := r.cacheSpec(ctx, vol)
	if err != nil {
		return err
	}
	owner, err := r.ownerOf(ctx, spec.Owner)
	if err != nil {
		return err // unknown: keep the cache
	}
	if owner != nil && owner.Status.NodeName == r.nodeName && owner.Status.VolumeHandle == vol {
		klog.V(2).InfoS("Keeping a cache whose binding is admitted here but not labelled with this node yet",
			"volumeID", vol, "binding", klog.KObj(owner), "label", ssdv1.LabelNode)
		return nil
	}
	if err := r.engine.Detach(ctx, vol); err != nil && !errors.Is(err, cache.ErrNotStaged) {
		return err
	}
	klog.InfoS("Detached a cache that no binding admitted to this node claims", "volumeID", vol, "owner", spec.Owner)
	if owner != nil {
		r.recorder.Eventf(owner, nil, corev1.EventTypeNormal, "CacheDetached", "Detach",
			"cache detached from volume %s: the binding is no longer admitted to node %s", vol, r.nodeName)
	}
	return nil
}

// cacheSpec describes a volume's cache: the one staged, or the LVs a clean
// unstage kept.
func (r *BindingReconciler) cacheSpec(ctx context.Context, vol string) (cache.Spec, error) {
	st, err := r.engine.Inspect(ctx, vol)
	if err != nil || st.Staged {
		return st.Spec, err
	}
	spec, _, err := r.engine.KeptCache(ctx, vol)
	return spec, err
}

// claimedVolumes returns the volumes the bindings admitted to this node name.
// The list is read-only: the client's cache holds this node's bindings alone,
// and they are not copied.
func (r *BindingReconciler) claimedVolumes(ctx context.Context) (sets.Set[string], error) {
	var list ssdv1.CacheBindingList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	vols := sets.New[string]()
	for i := range list.Items {
		if b := &list.Items[i]; b.Status.NodeName == r.nodeName && b.Status.VolumeHandle != "" {
			vols.Insert(b.Status.VolumeHandle)
		}
	}
	return vols, nil
}

// ownerOf reads from the API server the binding a cache was made for (its
// owner, "namespace/name/uid"); nil when it no longer exists, has another
// UID, or the owner is not a binding's.
func (r *BindingReconciler) ownerOf(ctx context.Context, owner string) (*ssdv1.CacheBinding, error) {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return nil, nil
	}
	b := &ssdv1.CacheBinding{}
	if err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: parts[0], Name: parts[1]}, b); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if string(b.UID) != parts[2] {
		return nil, nil
	}
	return b, nil
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
