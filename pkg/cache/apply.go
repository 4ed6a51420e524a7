package cache

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// applier carries one convergence's state between steps.
type applier struct {
	*Engine
	op       string
	volumeID string
	want     desired
	// table is the volume's table when the change began.
	table dm.Table
	lvs   []lvm.LV
	// uncachedWrites is observed.uncachedWrites.
	uncachedWrites *dm.WriteRegion
	// idleMetadata is what saveHotSet read from the idle metadata LV.
	idleMetadata *dm.CacheMetadata
	// filling is the fill in progress (fill.go), from stepWarm or
	// stepMapKept to stepLoadCache.
	filling *fill
	warmed  WarmReport
}

func (a *applier) apply(ctx context.Context, s step) error {
	switch s {
	case stepLoadLinear:
		return a.reload(ctx, a.op, a.volumeID, linearTable(a.want))
	case stepRemoveCacheLVs:
		return a.removeCacheLVs(ctx)
	case stepRemoveSpareMetadata:
		return a.removeSpareMetadata(ctx)
	case stepCreateCacheLVs:
		return a.createCacheLVs(ctx)
	case stepZeroMetadata:
		meta, _, err := a.pair()
		if err != nil {
			return err
		}
		return a.zeroMetadata(meta)
	case stepSaveHotSet:
		a.saveHotSet(ctx)
		return nil
	case stepWarm:
		return a.warm(ctx)
	case stepTrackUncachedWrites:
		return a.trackUncachedWrites(ctx)
	case stepForgetUncachedWrites:
		return a.dm.Untrack(ctx, DeviceName(a.volumeID), a.uncachedWrites.ID)
	case stepMapKept:
		return a.mapKept(ctx)
	case stepUntagKept:
		meta, _ := taggedClean(a.lvs)
		return a.lvm.ChangeTags(ctx, nil, []string{UnstagedCleanTag}, meta)
	case stepLoadCache:
		meta, data, err := a.pair()
		if err != nil {
			return err
		}
		table, err := cacheTable(a.want, meta, data, a.loadPolicy())
		if err != nil {
			return err
		}
		if a.filling != nil {
			err = a.loadFilled(ctx, table, meta)
		} else if err = a.reload(ctx, a.op, a.volumeID, table); err == nil {
			a.layouts.loaded(a.volumeID, table, nil) // over zeroed metadata (plan)
		}
		if err == nil {
			a.startPromoting(ctx, table)
		}
		return err
	}
	return fmt.Errorf("unknown step %q", s)
}

func (a *applier) pair() (meta, data lvm.LV, err error) {
	meta, data, fit := fittingLVs(a.lvs, a.want)
	if !fit {
		return meta, data, fmt.Errorf("cache LVs of %s are missing or the wrong size", a.volumeID)
	}
	return meta, data, nil
}

func (a *applier) removeCacheLVs(ctx context.Context) error {
	for _, lv := range a.lvs {
		if err := a.lvm.RemoveLV(ctx, lv.VG, lv.Name); err != nil && !errors.Is(err, lvm.ErrNotFound) {
			return err
		}
	}
	a.lvs = nil
	return nil
}

func (a *applier) removeSpareMetadata(ctx context.Context) error {
	spare, ok := spareMetadata(observed{table: a.table, cacheLVs: a.lvs})
	if !ok {
		return nil
	}
	if err := a.lvm.RemoveLV(ctx, spare.VG, spare.Name); err != nil && !errors.Is(err, lvm.ErrNotFound) {
		return err
	}
	a.lvs = withoutLV(a.lvs, spare)
	return nil
}

// createCacheLVs creates the metadata LV, then the data LV. A crash between
// the two leaves one LV, which the next plan removes and recreates.
func (a *applier) createCacheLVs(ctx context.Context) error {
	size := a.want.cache.SizeBytes
	meta, err := a.lvm.CreateLV(ctx, a.want.vg, metadataLVName(a.volumeID), a.want.metadataBytes(),
		a.tags(lvm.RoleCacheMetadata))
	if err != nil {
		return err
	}
	a.lvs = append(a.lvs, meta)
	a.faults.Reached(ctx, a.op+"/metadata-lv-created")
	data, err := a.lvm.CreateLV(ctx, a.want.vg, dataLVName(a.volumeID), size,
		append(a.tags(lvm.RoleCacheData), cacheBytesTag(size)))
	if err != nil {
		return err
	}
	a.lvs = append(a.lvs, data)
	return nil
}

// tags are those of a new cache LV of role: its volume, role and owner.
func (a *applier) tags(role lvm.Role) []string {
	tags := lvm.Tags(a.volumeID, role)
	if owner := a.want.cache.Owner; owner != "" {
		tags = append(tags, lvm.OwnerTagPrefix+owner)
	}
	return tags
}

// zeroMetadata zeroes the head of a metadata LV: dm-cache then formats
// fresh, empty metadata (safety rule 2).
func (a *applier) zeroMetadata(meta lvm.LV) error {
	return a.dev.ZeroHead(meta.Path, meta.DevNum, min(meta.Size, zeroMetadataBytes))
}

// loadPolicy is the policy a new cache table runs: the promoter fills a
// cache that warms up, when there is one and the cache metadata tools are
// there.
func (a *applier) loadPolicy() string {
	if a.promoted && a.metadata != nil && a.reads != nil && a.want.cache.Warm {
		return PolicyFilling
	}
	return PolicyReplacing
}

// startPromoting has a new cache's reads counted for Promote when it warms
// up, and stops counting otherwise. Without the count the cache still works.
func (a *applier) startPromoting(ctx context.Context, table dm.Table) {
	if a.metadata == nil || a.reads == nil {
		return
	}
	if err := a.trackReads(ctx, a.volumeID, table, a.want.cache.Warm); err != nil {
		klog.ErrorS(err, "Could not set up read counting; reads are promoted by dm-cache alone", "volumeID", a.volumeID)
	}
}
