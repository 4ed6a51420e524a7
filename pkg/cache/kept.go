package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A paused cache keeps its LVs behind a linear table. Taking the cache out
// cleanly leaves its metadata a true account of what its data LV holds, so
// a resume can map those blocks again instead of copying the hot set from
// the HDD: all it must know is which of them the origin changed under
// meanwhile. A dm-stats region of the volume's device, started while the
// cache still serves, counts every write from before the swap to linear
// until the resume's load; it lives in the kernel, so it survives the
// plugin, and dies with the device, so an unstage or a reboot leaves no
// region and the cache is filled as before (safety rule 2). The region is
// forgotten whenever the LVs it vouches for are removed or replaced.

// errNoKeptBlocks: the kept LVs cannot be mapped again as they are.
var errNoKeptBlocks = errors.New("the paused cache's metadata cannot be mapped again")

// trackUncachedWrites starts counting the writes through the volume's
// device while its cache still serves, before the swap to linear that
// pauses it. Areas are those a warm-up of this cache would count.
func (a *applier) trackUncachedWrites(ctx context.Context) error {
	live, ok := a.table.Target.(dm.CacheTarget)
	if !ok {
		return fmt.Errorf("volume %s: no live cache to take out", a.volumeID)
	}
	r, err := a.dm.TrackUncachedWrites(ctx, DeviceName(a.volumeID), a.trackingAreaSectors(live.BlockSectors, a.table.Length))
	if err != nil {
		return err
	}
	klog.V(2).InfoS("Counting writes while the cache is out", "volumeID", a.volumeID, "region", r.ID, "areaSectors", r.AreaSectors)
	return nil
}

// mapKept has loadFilled map the kept cache's blocks again but for those in
// areas written since it was taken out, which loadFilled reads with the
// device suspended, so that no write escapes. Nothing is read from the
// origin. Kept LVs that cannot be mapped again are filled as a new cache:
// zeroed (safety rule 2) and, if it warms up, from the hot set.
func (a *applier) mapKept(ctx context.Context) error {
	meta, data, err := a.pair()
	if err != nil {
		return err
	}
	f, err := a.keptFill(ctx, meta, data)
	if err == nil {
		a.writeKeptAhead(ctx, f, meta)
		a.filling = f
		return nil
	}
	klog.InfoS("The paused cache's blocks cannot be mapped again; it is filled anew", "volumeID", a.volumeID, "err", err)
	if err := a.dm.Untrack(ctx, DeviceName(a.volumeID), a.uncachedWrites.ID); err != nil {
		return err
	}
	if err := a.zeroMetadata(meta); err != nil {
		return err
	}
	if a.want.cache.Warm {
		return a.warm(ctx)
	}
	return nil
}

// writeKeptAhead leaves out the kept blocks in areas written so far and
// writes the mappings of the others while no table uses the metadata LV,
// so that loadFilled rewrites them, with the volume's I/O held, only if
// more kept blocks were written meanwhile: cache_restore takes seconds
// for a large cache. A failure leaves all of it to loadFilled.
func (a *applier) writeKeptAhead(ctx context.Context, f *fill, meta lvm.LV) {
	written, err := a.dm.WrittenAreas(ctx, DeviceName(a.volumeID), f.region)
	if err != nil {
		return
	}
	f.droppedAhead = f.dropWrittenKept(written)
	a.restoreAhead(ctx, f, meta)
}

// keptFill is a fill whose kept blocks are what the idle metadata maps
// and whose write count is the region counting since the cache went out.
func (a *applier) keptFill(ctx context.Context, meta, data lvm.LV) (*fill, error) {
	md, err := a.keptMetadata(ctx, meta)
	if err != nil {
		return nil, err
	}
	bs, r := a.want.blockSectors(), a.uncachedWrites
	f := newFill(bs, data.Size/(bs*dm.SectorSize), a.want.length, a.trackedAreas)
	switch {
	case md.BlockSectors != bs || md.CacheBlocks != f.cacheBlocks:
		return nil, fmt.Errorf("%w: it has %d blocks of %d sectors, the cache %d of %d", errNoKeptBlocks, md.CacheBlocks, md.BlockSectors, f.cacheBlocks, bs)
	case r.AreaSectors < bs || r.AreaSectors%bs != 0:
		return nil, fmt.Errorf("%w: writes were counted in areas of %d sectors, not whole blocks of %d", errNoKeptBlocks, r.AreaSectors, bs)
	}
	if dirty := dirtyMappings(md.Mappings); dirty > 0 {
		return nil, fmt.Errorf("%w: %d dirty mappings, which a writethrough cache never writes", errNoKeptBlocks, dirty)
	}
	f.region, f.areaBlocks = r.ID, r.AreaSectors/bs
	f.kept = slices.DeleteFunc(slices.Clone(md.Mappings), func(m dm.Mapping) bool { return m.Origin >= f.originBlocks })
	return f, nil
}

// keptMetadata is what the idle metadata LV maps: read by saveHotSet
// earlier in the change, or now.
func (a *applier) keptMetadata(ctx context.Context, meta lvm.LV) (dm.CacheMetadata, error) {
	if a.idleMetadata != nil {
		return *a.idleMetadata, nil
	}
	if a.metadata == nil {
		return dm.CacheMetadata{}, fmt.Errorf("%w: no cache metadata tools", errNoKeptBlocks)
	}
	md, err := a.metadata.Dump(ctx, meta.Path)
	if err != nil {
		return dm.CacheMetadata{}, fmt.Errorf("%w: %w", errNoKeptBlocks, err)
	}
	return md, nil
}

// A clean unstage keeps a live cache's LVs as well: removing the device
// shut the cache down cleanly, so its metadata maps what its data LV holds.
// Between that unstage and the next stage nothing writes the origin LV but
// ssdcache itself, which always stages through the volume's device; the
// metadata LV carries UnstagedCleanTag meanwhile. Stage starts the count of
// writes on the new device before it returns, so before anything mounts or
// writes it, and only then deletes the tag: from there the count vouches
// for the LVs as it does for a paused cache, and it dies with the device,
// so a reboot while staged leaves neither tag nor count (safety rule 2).
// Any change that loads a cache table over the LVs deletes the tag first.
// A static disk (OriginDisk) may be written by anyone while unstaged, so
// its cache LVs are never kept.
const UnstagedCleanTag = "ssdcache.io/unstaged-clean"

// taggedClean returns the metadata LV of a pair a clean unstage kept.
func taggedClean(lvs []lvm.LV) (lvm.LV, bool) {
	i := slices.IndexFunc(lvs, func(lv lvm.LV) bool { return lv.HasTag(UnstagedCleanTag) })
	if i < 0 {
		return lvm.LV{}, false
	}
	return lvs[i], true
}

// keepOrRemove ends an unstage whose device, now removed, ran table: a
// cache over the volume's own origin LV keeps its pair of LVs, tagged; any
// other cache LVs are removed.
func (a *applier) keepOrRemove(ctx context.Context, table dm.Table) error {
	origin, err := a.OriginLV(ctx, a.volumeID)
	if meta, ok := a.keepablePair(table.Target.(dm.CacheTarget), a.lvs, origin.DevNum); err == nil && ok {
		a.faults.Reached(ctx, "unstage/keep-cache-lvs")
		return a.lvm.ChangeTags(ctx, []string{UnstagedCleanTag}, nil, meta)
	}
	a.faults.Reached(ctx, "unstage/remove-cache-lvs")
	return a.removeCacheLVs(ctx)
}

// keepablePair returns the metadata LV of live, a cache table of the
// volume, if its LVs may outlive the table: they are the volume's only
// cache LVs, the cache is over origin, the volume's own origin LV (a static
// disk may be written by anyone while no cache is in front of it), and its data
// LV was flushed: writethrough completed the kept blocks' writes, maybe
// only into the SSD's volatile cache, and they must outlive a power loss
// before the next stage.
func (e *Engine) keepablePair(live dm.CacheTarget, lvs []lvm.LV, origin dm.DevNum) (lvm.LV, bool) {
	meta, ok := activeLV(lvs, lvm.RoleCacheMetadata)
	data, _ := activeLV(lvs, lvm.RoleCacheData)
	if !ok || len(lvs) != 2 || meta.DevNum != live.Metadata || data.DevNum != live.Data {
		return lvm.LV{}, false
	}
	if origin.IsZero() || origin != live.Origin || e.dev.Flush(data.Path, data.DevNum) != nil {
		return lvm.LV{}, false
	}
	return meta, true
}

// activateKept activates the cache LVs of an unstaged volume that a clean
// unstage or a shutdown mark kept, when a boot without LVM's autoactivation
// (auto_activation_volume_list, event_activation off) left them inactive:
// judging a mark reads their metadata, and only an active pair is mapped
// again. Activation writes nothing to them. A pair that cannot be activated
// (a PV missing) is left as it is, to be made anew like any other.
func (e *Engine) activateKept(ctx context.Context, volumeID string, lvs []lvm.LV) ([]lvm.LV, error) {
	kept := slices.ContainsFunc(lvs, func(lv lvm.LV) bool { return lv.HasTag(UnstagedCleanTag) || len(shutdownMarks(lv)) > 0 })
	inactive := slices.DeleteFunc(slices.Clone(lvs), func(lv lvm.LV) bool { return !lv.DevNum.IsZero() })
	if !kept || len(inactive) == 0 {
		return lvs, nil
	}
	for _, lv := range inactive {
		if err := e.lvm.ActivateLV(ctx, lv.VG, lv.Name); err != nil {
			klog.InfoS("Could not activate a kept cache LV; the cache is made anew", "volumeID", volumeID, "lv", lv.VG+"/"+lv.Name, "err", err)
			return lvs, nil
		}
	}
	obs, err := e.observe(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	klog.InfoS("Activated the kept cache LVs LVM left inactive at boot", "volumeID", volumeID, "lvs", len(inactive))
	return obs.cacheLVs, nil
}

// countWritesOverKept turns the tag of the cache LVs a clean unstage kept
// into a count of the writes through the volume's device, just staged and
// not yet mounted, in areas a resume of that cache reads.
func (e *Engine) countWritesOverKept(ctx context.Context, volumeID string, lvs []lvm.LV) error {
	meta, ok := taggedClean(lvs)
	if !ok {
		return nil
	}
	name := DeviceName(volumeID)
	table, err := e.dm.Table(ctx, name)
	if err != nil {
		return err
	}
	if _, linear := table.Target.(dm.LinearTarget); linear {
		bs := e.minBlockSectors
		if data, ok := activeLV(lvs, lvm.RoleCacheData); ok {
			bs = cachesize.BlockSectorsFor(requestedBytes(data), e.minBlockSectors)
		}
		if _, err := e.dm.TrackUncachedWrites(ctx, name, e.trackingAreaSectors(bs, table.Length)); err != nil {
			return err
		}
	}
	e.faults.Reached(ctx, "stage/count-writes-over-kept")
	return e.lvm.ChangeTags(ctx, nil, []string{UnstagedCleanTag}, meta)
}

// removeKept removes the cache LVs of an unstaged volume.
func (e *Engine) removeKept(ctx context.Context, volumeID string) error {
	obs, err := e.observe(ctx, volumeID)
	if err != nil || obs.staged {
		return err
	}
	run := &applier{Engine: e, op: "detach", volumeID: volumeID, lvs: obs.cacheLVs}
	return run.removeCacheLVs(ctx)
}

// KeptCache describes the cache LVs a clean unstage kept for an unstaged
// volume, if it has any: its owner is what they were made for.
func (e *Engine) KeptCache(ctx context.Context, volumeID string) (Spec, bool, error) {
	obs, err := e.observe(ctx, volumeID)
	if err != nil || obs.staged {
		return Spec{}, false, err
	}
	spec, ok := e.specOf(obs)
	return spec, ok, nil
}
