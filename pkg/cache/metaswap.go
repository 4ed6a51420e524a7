package cache

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A promotion into a serving cache whose mapped blocks the engine knows
// (layouts) maps its batch without ever taking the cache out of service:
// the kept and new mappings are written into a second metadata LV beside
// the live one while the cache serves, and the table is loaded again over
// it. The volume is suspended only for that load, never served from the
// HDD alone, however many blocks the cache maps; cache_dump and
// cache_restore of every mapping, which grow with the cache, run outside
// it. The metadata LV replaced is then removed: the two names alternate
// (nextMetadataLVName). The second LV needs the metadata's size free in the
// cache VG for the duration; without it the promotion swaps the cache out
// as before.

// swapMetadata maps f's kept and copied blocks by loading table again over
// a new metadata LV. done is false when it changed nothing and the caller
// should map the batch with the cache swapped out instead; retry are the
// copied blocks to promote again when the swap failed and was rolled back.
func (a *applier) swapMetadata(ctx context.Context, table dm.Table, meta lvm.LV, f *fill) (done bool, retry []uint64, err error) {
	// Copies written during the copy are left out before the mappings are
	// written, so only a write between this look and the suspend (while
	// cache_restore runs) has them written again with the device suspended.
	written, err := a.dm.WrittenAreasAmong(ctx, DeviceName(a.volumeID), f.region, f.copyAreas())
	if err != nil {
		return false, nil, nil // the swap below reads them with the device suspended
	}
	droppedEarly := f.dropWrittenCopies(written)
	if len(f.copies) == 0 {
		a.untrack(ctx, f)
		a.warmed = WarmReport{Dropped: droppedEarly, CopiedWhileServing: true}
		return true, nil, nil // every copy was written: nothing new to map
	}
	f.keptServed = true
	next, ok := a.writeNextMetadata(ctx, meta, f)
	if !ok {
		f.keptServed = false
		return false, nil, nil
	}
	live := table.Target.(dm.CacheTarget)
	live.Metadata = next.DevNum
	swapped := dm.Table{Length: table.Length, Target: live}
	md, suspended, err := a.loadOverNext(ctx, swapped, next, f)
	a.warmed.Suspended, a.warmed.CopiedWhileServing = suspended, true
	a.warmed.Dropped += droppedEarly
	if err != nil {
		// Rolled back: the cache serves on its old metadata, as before.
		a.warmed.Blocks, a.warmed.Bytes = 0, 0
		a.removeLV(ctx, next, "the metadata LV of a promotion that was rolled back")
		a.relearnLayout(ctx, table, f.kept)
		return true, originsOf(f.copies), err
	}
	a.layouts.loaded(a.volumeID, swapped, md.Mappings)
	if len(md.Mappings) > 0 {
		a.saveMappings(md)
	}
	a.faults.Reached(ctx, a.op+"/metadata-swapped")
	// The old metadata, committed by the kernel at the suspend, is live no
	// more: it shows whether the copies went into blocks it left free.
	if err := a.checkReplacedMetadata(ctx, meta, f); err != nil {
		err = a.comeBackCold(ctx, swapped, next, f, err)
		a.removeLV(ctx, meta, "the metadata LV a promotion replaced")
		return true, nil, err
	}
	a.removeLV(ctx, meta, "the metadata LV a promotion replaced")
	return true, nil, nil
}

// loadOverNext loads table, whose metadata LV next already maps f's
// blocks, in place of the live cache table. The table is loaded before the
// suspend, so the device is suspended only for the look at the writes and
// the swap, unless a copy was written after swapMetadata looked (while
// cache_restore ran): the metadata is then written again without it, with
// the device suspended, as the swap to a linear table does. Giving the swap
// up instead would never map a batch under steady writes. md is what ends
// up mapped; suspended is how long the device held its I/O.
func (a *applier) loadOverNext(ctx context.Context, table dm.Table, next lvm.LV, f *fill) (md dm.CacheMetadata, suspended time.Duration, err error) {
	name := DeviceName(a.volumeID)
	defer a.untrack(ctx, f)
	suspended, err = a.reloadLoadedAhead(ctx, a.op, a.volumeID, table, func(ctx context.Context) (func(context.Context) error, error) {
		// Only the copies' areas matter (the kept blocks are served, and
		// writethrough kept them current): reading those alone keeps the
		// read, the largest part of the suspension, apart from the region's
		// size.
		written, err := a.dm.WrittenAreasAmong(ctx, name, f.region, f.copyAreas())
		if err != nil {
			return nil, err
		}
		var report WarmReport
		md, report = f.metadata(written)
		report.Duration = time.Since(f.start)
		a.warmed = report
		if report.Dropped == 0 {
			return nil, nil
		}
		return func(ctx context.Context) error { return a.metadata.Restore(ctx, next.Path, md) }, nil
	})
	return md, suspended, err
}

// handOverOnNextMetadata loads handed, the live cache table on smq, over a
// second metadata LV holding the mappings the engine knows the live cache
// has. done is false when it changed nothing (mappings not known, no room
// for the LV, the metadata tools failing) and the caller should reload over
// the live metadata instead. The replaced metadata, committed by the kernel
// at the suspend, must map exactly those blocks; a cache that mapped others
// comes back cold, as after a promotion into blocks it mapped.
func (a *applier) handOverOnNextMetadata(ctx context.Context, table dm.Table, handed dm.CacheTarget) (done bool, err error) {
	live := table.Target.(dm.CacheTarget)
	meta, data, ok := liveLVs(a.lvs, live)
	if !ok || a.metadata == nil {
		return false, nil
	}
	status, err := a.cacheStatus(ctx, a.volumeID)
	if err != nil {
		return false, nil
	}
	mapped, known := a.layouts.mapped(a.volumeID, live, status.CacheUsed)
	if !known {
		return false, nil
	}
	f := newFill(live.BlockSectors, data.Size/(live.BlockSectors*dm.SectorSize), table.Length, a.trackedAreas)
	f.kept = mapped
	next, ok := a.writeNextMetadata(ctx, meta, f)
	if !ok {
		return false, nil
	}
	handed.Metadata = next.DevNum
	swapped := dm.Table{Length: table.Length, Target: handed}
	// Nothing was copied: no write can have made a mapping stale, and the
	// device is suspended only for the swap.
	suspended, err := a.reloadLoadedAhead(ctx, a.op, a.volumeID, swapped, func(context.Context) (func(context.Context) error, error) { return nil, nil })
	if err != nil {
		a.removeLV(ctx, next, "the metadata LV of a hand-over that was rolled back")
		a.relearnLayout(ctx, table, mapped)
		return true, err
	}
	a.faults.Reached(ctx, a.op+"/metadata-swapped")
	klog.V(2).InfoS("Handed over on a second metadata LV", "volumeID", a.volumeID, "mappings", len(mapped), "suspended", suspended)
	if err := a.checkHandedOver(ctx, meta, mapped); err != nil {
		err = a.comeBackCold(ctx, swapped, next, f, err)
		a.removeLV(ctx, meta, "the metadata LV a hand-over replaced")
		return true, err
	}
	a.removeLV(ctx, meta, "the metadata LV a hand-over replaced")
	return true, nil
}

// checkHandedOver reads the metadata the cache served on before a
// hand-over: clean mappings, exactly those the new metadata was given.
func (a *applier) checkHandedOver(ctx context.Context, meta lvm.LV, mapped []dm.Mapping) error {
	replaced, err := a.replacedMappings(ctx, meta, "a hand-over")
	if err != nil {
		return err
	}
	if !sameMappings(replaced, mapped) {
		return fmt.Errorf("the metadata a hand-over replaced maps %d blocks, not the %d the engine loaded: its layout was not the one loaded", len(replaced), len(mapped))
	}
	return nil
}

// sameMappings tells whether two lists map the same blocks, in any order.
func sameMappings(a, b []dm.Mapping) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(m dm.Mapping) [2]uint64 { return [2]uint64{m.Cache, m.Origin} }
	seen := make(map[[2]uint64]bool, len(a))
	for _, m := range a {
		seen[key(m)] = true
	}
	return !slices.ContainsFunc(b, func(m dm.Mapping) bool { return !seen[key(m)] })
}

// relearnLayout records again what a cache table maps after a swap rolled
// back to it (reloadWith forgot it), so the next promotion copies while it
// serves; only if the device runs that table again.
func (a *applier) relearnLayout(ctx context.Context, table dm.Table, mapped []dm.Mapping) {
	if live, err := a.dm.Table(ctx, DeviceName(a.volumeID)); err == nil && live.String() == table.String() {
		a.layouts.loaded(a.volumeID, table, mapped)
	}
}

// writeNextMetadata creates the LV beside meta and writes f's mappings into
// it; false when either fails, with the LV removed again.
func (a *applier) writeNextMetadata(ctx context.Context, meta lvm.LV, f *fill) (lvm.LV, bool) {
	next, err := a.lvm.CreateLV(ctx, meta.VG, nextMetadataLVName(a.volumeID, meta.Name), meta.Size, slices.Clone(meta.Tags)) // volume, role, owner
	if err != nil {
		klog.V(2).InfoS("No room for a second metadata LV; the promotion swaps the cache out", "volumeID", a.volumeID, "err", err)
		return lvm.LV{}, false
	}
	a.faults.Reached(ctx, a.op+"/next-metadata-created")
	md, _ := f.metadata(nil)
	if err := a.metadata.Restore(ctx, next.Path, md); err != nil {
		klog.ErrorS(err, "Could not write the mappings beside the live ones; the promotion swaps the cache out", "volumeID", a.volumeID)
		a.removeLV(ctx, next, "a second metadata LV that could not be written")
		return lvm.LV{}, false
	}
	f.restoredAhead = true
	return next, true
}

// checkReplacedMetadata reads the metadata the cache served on before the
// swap: clean mappings, exactly the kept ones' cache blocks, none where a
// copy went.
func (a *applier) checkReplacedMetadata(ctx context.Context, meta lvm.LV, f *fill) error {
	mapped, err := a.replacedMappings(ctx, meta, "a promotion")
	if err != nil {
		return err
	}
	return copiesIntoFree(mapped, f.copies)
}

// replacedMappings reads what the metadata LV a swap replaced maps, which
// the kernel committed at the suspend: only clean mappings, as a
// writethrough cache never writes a dirty one. by names the swap.
func (a *applier) replacedMappings(ctx context.Context, meta lvm.LV, by string) ([]dm.Mapping, error) {
	md, err := a.metadata.Dump(ctx, meta.Path)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata %s replaced: %w", by, err)
	}
	if dirty := dirtyMappings(md.Mappings); dirty > 0 {
		return nil, fmt.Errorf("the metadata %s replaced has %d dirty mappings, which a writethrough cache never writes", by, dirty)
	}
	return md.Mappings, nil
}

// comeBackCold loads the cache again with no mapping after a swap that
// mapped blocks which may not hold the origin's data, through a linear
// table so that no live cache table uses the metadata while it is written
// (empty, or zeroed if that fails: safety rule 2), and forgets the hot
// set, which names them.
func (a *applier) comeBackCold(ctx context.Context, table dm.Table, meta lvm.LV, f *fill, why error) error {
	if err := a.reload(ctx, a.op, a.volumeID, linearTable(a.want)); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrCacheLeftOut, why, err)
	}
	f.kept, f.copies = nil, nil
	empty, _ := f.metadata(nil)
	if err := a.metadata.Restore(ctx, meta.Path, empty); err != nil {
		if err := a.zeroMetadata(meta); err != nil {
			return fmt.Errorf("%w: %w: %w", ErrCacheLeftOut, why, err)
		}
	}
	if err := a.reload(ctx, a.op, a.volumeID, table); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrCacheLeftOut, why, err)
	}
	a.layouts.loaded(a.volumeID, table, nil)
	a.forgetHotSetOfColdCache()
	return fmt.Errorf("%w; the cache came back cold", why)
}

// removeLV removes an LV no table uses; one left behind is removed by the
// volume's next change (stepRemoveSpareMetadata) or detach.
func (a *applier) removeLV(ctx context.Context, lv lvm.LV, what string) {
	if err := a.lvm.RemoveLV(context.WithoutCancel(ctx), lv.VG, lv.Name); err != nil {
		klog.ErrorS(err, "Could not remove "+what, "volumeID", a.volumeID, "lv", lv.VG+"/"+lv.Name)
	}
}
