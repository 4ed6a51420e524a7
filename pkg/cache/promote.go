package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

// smq promotes a block only once it has been read on several of its ticks,
// so a first pass over new data is served by the HDD and so, mostly, is the
// second. Promotion does in one batch what smq would do over passes: the
// blocks reads brought to a volume (dm-stats counts reads per cache block on
// the volume's device, whatever its table) are copied from the origin into
// the cache's free blocks while the cache serves from the blocks it maps
// (layouts: the engine knows which those are), then, with the cache swapped
// out for a linear table only for as long as writing its metadata takes,
// mapped: a promotion is the entry of a fill (fill.go) whose copies are
// the blocks read, as a warm-up is one whose copies are the hot set. A
// cache whose mapped
// blocks the engine does not know (it restarted since the load, or the
// cache runs smq) gets a smaller batch, copied with the cache swapped out.
// Blocks the cache already maps keep their place; any block written from
// before the copy until the cache is back is left unmapped.

// trackReads has the misses of a volume's live cache recorded when on
// (readtrack), so that Promote has blocks to promote, and stops recording
// otherwise. A volume whose cache is not live is left alone.
func (e *Engine) trackReads(ctx context.Context, volumeID string, table dm.Table, on bool) error {
	name := DeviceName(volumeID)
	live, cached := table.Target.(dm.CacheTarget)
	if !on || !cached {
		return e.reads.Untrack(ctx, name)
	}
	dev, err := e.dm.Info(ctx, name)
	if err != nil {
		return err
	}
	return e.reads.Track(ctx, name, readtrack.Volume{Device: dev.DevNum, Origin: live.Origin, BlockSectors: live.BlockSectors})
}

// ReadBlocks returns the origin blocks (of the live cache's block size,
// table from Health) whose reads the volume's cache missed since the
// previous call, and false when the promoter does not fill the cache: it
// is not live, runs smq, or its misses cannot be recorded. A cache the
// promoter fills whose misses are not recorded yet (the plugin restarted)
// starts being recorded. What a call returns is bounded by
// readtrack.MaxBlocksPerTake, whatever the volume's size.
func (e *Engine) ReadBlocks(ctx context.Context, volumeID string, table dm.Table) ([]uint64, bool, error) {
	live, cached := table.Target.(dm.CacheTarget)
	if !cached || live.Policy != PolicyFilling || e.reads == nil {
		return nil, false, nil
	}
	blocks, err := e.reads.Take(ctx, DeviceName(volumeID))
	if errors.Is(err, readtrack.ErrNotTracked) {
		if err := e.trackReads(ctx, volumeID, table, true); err != nil {
			klog.ErrorS(err, "Could not record the cache's misses; its blocks are left to smq", "volumeID", volumeID)
			return nil, false, nil
		}
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	// dm-cache never caches the origin's last, partial block.
	whole := table.Length / live.BlockSectors
	return slices.DeleteFunc(blocks, func(b uint64) bool { return b >= whole }), true, nil
}

// Promote maps blocks (origin blocks of the live cache's block size) that
// the cache does not hold into its free blocks, and reports what it mapped
// and the blocks it left for a later promotion: those beyond one batch
// while the cache had room for them. A volume without a live writethrough
// cache is left alone. On a failure after the swap the cache comes back
// cold, never with a stale block, its hot set is deleted, and the error is
// returned with the blocks left.
func (e *Engine) Promote(ctx context.Context, volumeID string, blocks []uint64) (WarmReport, []uint64, error) {
	if e.metadata == nil {
		return WarmReport{}, nil, nil
	}
	obs, want, err := e.current(ctx, volumeID)
	if err != nil {
		return WarmReport{}, nil, err
	}
	live, cached := obs.table.Target.(dm.CacheTarget)
	if !cached || live.Mode != dm.Writethrough {
		return WarmReport{}, nil, nil
	}
	meta, data, ok := liveLVs(obs.cacheLVs, live)
	if !ok {
		return WarmReport{}, nil, fmt.Errorf("promote on volume %s: the LVs of its live cache table are not found", volumeID)
	}
	status, err := e.cacheStatus(ctx, volumeID)
	if err != nil {
		return WarmReport{}, nil, fmt.Errorf("promote on volume %s: %w", volumeID, err)
	}
	run := &applier{Engine: e, op: "promote", volumeID: volumeID, want: want, lvs: obs.cacheLVs}
	left, err := run.promote(ctx, obs.table, meta, data, status.CacheUsed, blocks)
	if err != nil {
		return run.warmed, left, fmt.Errorf("promote on volume %s: %w", volumeID, err)
	}
	return run.warmed, left, nil
}

// heldBlocks are the origin blocks the volume's hot set, saved at its last
// fill or promotion, says its cache holds (at most limit of them).
func (e *Engine) heldBlocks(volumeID string, blockSectors, originSectors, limit uint64) map[uint64]bool {
	held := map[uint64]bool{}
	if e.hotSets == nil {
		return held
	}
	if set, ok, err := e.hotSets.Load(volumeID); err == nil && ok {
		for _, b := range set.Blocks(blockSectors, originSectors, limit) {
			held[b] = true
		}
	}
	return held
}

// HandOver lets smq replace the blocks of a volume's cache that the
// promoter no longer fills (it is full, or its reads are not counted). Every
// mapping stays. Where the engine knows them (layouts), they are written
// into a second metadata LV and smq is loaded over it, as a promotion's
// swap does: a table opening metadata no table has open clears dm-cache's
// clean-shutdown flag, so a clean reboot can still tell its removal from a
// power loss and come back warm (shutdown.go). Otherwise the live table is
// loaded again with smq over the metadata it just committed when
// suspended, which leaves that flag set while it serves. A cache already
// on smq, or not live, is left alone.
func (e *Engine) HandOver(ctx context.Context, volumeID string) error {
	obs, want, err := e.current(ctx, volumeID)
	if err != nil {
		return err
	}
	live, cached := obs.table.Target.(dm.CacheTarget)
	if !cached || live.Policy == PolicyReplacing {
		return nil
	}
	handed := live
	handed.Policy = PolicyReplacing
	run := &applier{Engine: e, op: "hand-over", volumeID: volumeID, want: want, lvs: obs.cacheLVs}
	if done, err := run.handOverOnNextMetadata(ctx, obs.table, handed); done {
		if err != nil {
			return fmt.Errorf("hand over volume %s to %s: %w", volumeID, PolicyReplacing, err)
		}
		return nil
	}
	if err := e.reload(ctx, "hand-over", volumeID, dm.Table{Length: obs.table.Length, Target: handed}); err != nil {
		return fmt.Errorf("hand over volume %s to %s: %w", volumeID, PolicyReplacing, err)
	}
	return nil
}

func liveLVs(lvs []lvm.LV, live dm.CacheTarget) (meta, data lvm.LV, ok bool) {
	i := slices.IndexFunc(lvs, func(lv lvm.LV) bool { return lv.DevNum == live.Metadata })
	j := slices.IndexFunc(lvs, func(lv lvm.LV) bool { return lv.DevNum == live.Data })
	if i < 0 || j < 0 {
		return meta, data, false
	}
	return lvs[i], lvs[j], true
}

// A promotion copies a batch of at most BatchBytes: what is left is the
// next batch. Every batch writes all kept mappings again (cache_restore), so
// a batch of a fixed size would make filling a cache cost batches x
// mappings, quadratic in the cache's size; batches of a share of the cache
// (at most fillBatches to fill it, and never less than minBatchBytes) make
// it linear.
const (
	minBatchBytes = 1 << 30
	fillBatches   = 16
	// batchTimePerGiB bounds a batch's time per GiB copied: an HDD slowed
	// to under 2 MB/s by its application gives way to it.
	batchTimePerGiB = 10 * time.Minute
)

// BatchBytes is the most one promotion copies into a cache of cacheBytes:
// a 32 GiB cache fills in 2 GiB batches, a 400 GB cache in 25 GB ones.
func BatchBytes(cacheBytes uint64) uint64 {
	return max(minBatchBytes, cacheBytes/fillBatches)
}

// BatchTimeout bounds one promotion or preload batch into a cache of
// cacheBytes, whose copy reads at most BatchBytes from the HDD.
func BatchTimeout(cacheBytes uint64) time.Duration {
	gib := (BatchBytes(cacheBytes) + 1<<30 - 1) >> 30
	return time.Duration(gib) * batchTimePerGiB
}

// maxSwappedOutBatchBytes bounds the copy of a promotion into a cache whose
// mapped blocks are not known while it serves (layouts): the copy runs
// with the cache swapped out, the volume serving from its origin alone,
// about a second in the VM.
const maxSwappedOutBatchBytes = 128 << 20

// swappedOutTimeout bounds the part of a promotion with the cache swapped
// out: a copy of at most maxSwappedOutBatchBytes, a metadata dump and a
// restore. It runs on a context of its own, so that a promotion asked to
// give way (VolumeLocks.Yield) stops its copy while the cache serves, never
// halfway through the swap, which would leave the volume uncached.
const swappedOutTimeout = 5 * time.Minute

// promote copies the new blocks from the origin into the cache's free
// blocks, swaps the cache out for a linear table, reads what its metadata
// maps and loads the cache again with old and new mappings. The copy runs
// while the cache serves when the blocks it maps are known (layouts), and
// after the swap, in a smaller batch, when they are not. Writes are counted
// from before the copy. It returns the blocks left for a later promotion.
func (a *applier) promote(ctx context.Context, table dm.Table, meta, data lvm.LV, used uint64, blocks []uint64) ([]uint64, error) {
	live := table.Target.(dm.CacheTarget)
	f := newFill(live.BlockSectors, data.Size/(live.BlockSectors*dm.SectorSize), table.Length, a.trackedAreas)
	f.saveMapped = true
	mapped, serving := a.layouts.mapped(a.volumeID, live, used)
	var left []uint64
	copyServing := func() error { return nil }
	switch {
	case serving:
		var picked []uint64
		if picked, left = toFetch(f, mapped, blocks, BatchBytes(f.cacheBytes())); len(picked) == 0 {
			return nil, nil // all mapped, or no room
		}
		f.copies = intoFreeBlocks(mapped, picked, f.cacheBlocks, f.originBlocks)
		copyServing = func() error { return a.copyBlocks(ctx, f, data) }
	case !a.mayHaveRoomFor(f, used, blocks):
		return nil, nil
	}
	if err := a.underWriteTracking(ctx, f, copyServing); err != nil {
		return append(originsOf(f.copies), left...), err // the cache served throughout: try them again
	}
	if serving {
		f.kept = mapped
		if done, retry, err := a.swapMetadata(ctx, table, meta, f); done {
			return append(retry, left...), err
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), swappedOutTimeout)
	defer cancel()
	swapped := time.Now()
	if err := a.reload(ctx, a.op, a.volumeID, linearTable(a.want)); err != nil {
		return nil, errors.Join(err, a.dm.Untrack(ctx, DeviceName(a.volumeID), f.region))
	}
	defer func() { a.warmed.Uncached, a.warmed.CopiedWhileServing = time.Since(swapped), serving }()
	a.faults.Reached(ctx, a.op+"/swapped-out")
	err := a.keepMapped(ctx, f, meta)
	if err == nil && !serving {
		left, err = a.copySwappedOut(ctx, f, data, blocks)
	}
	if err != nil {
		f.kept, f.copies, f.restoredAhead = nil, nil, false // what the metadata maps is not known
	}
	a.filling = f
	if err := a.loadFilled(ctx, table, meta); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCacheLeftOut, err)
	}
	if err != nil {
		// loadFilled deleted the hot set, which names blocks the cold cache
		// no longer maps.
		return left, fmt.Errorf("%w; the cache came back cold", err)
	}
	return left, nil
}

// mayHaveRoomFor tells, before a swap, whether a cache whose mapped blocks
// are not known may take any of blocks: it has a free block, and its hot
// set, saved at the last load, does not hold them all.
func (a *applier) mayHaveRoomFor(f *fill, used uint64, blocks []uint64) bool {
	if used >= f.cacheBlocks {
		return false
	}
	held := a.heldBlocks(a.volumeID, f.blockSectors, f.originBlocks*f.blockSectors, f.cacheBlocks)
	return slices.ContainsFunc(blocks, func(b uint64) bool { return b < f.originBlocks && !held[b] })
}

func originsOf(ms []dm.Mapping) []uint64 {
	origins := make([]uint64, len(ms))
	for i, m := range ms {
		origins[i] = m.Origin
	}
	return origins
}

// keepMapped reads what the swapped-out cache's metadata maps into f.kept
// and checks that no copy made while it served went into a block it maps.
func (a *applier) keepMapped(ctx context.Context, f *fill, meta lvm.LV) error {
	md, err := a.metadata.Dump(ctx, meta.Path)
	if err != nil {
		return err
	}
	f.kept = cleanMappings(md.Mappings)
	// loadFilled writes the metadata again even when nothing was copied: the
	// dump shows the mappings, not whether the kernel's commit at suspend,
	// whose failure it ignores, left the superblock marked clean; without
	// that mark the next load would take every mapping for dirty, and
	// writethrough would then trust the SSD over the origin.
	f.restoredAhead = false
	return copiesIntoFree(md.Mappings, f.copies)
}

// copySwappedOut picks a batch of blocks the swapped-out cache does not
// map, copies them into its free blocks and returns the blocks left.
func (a *applier) copySwappedOut(ctx context.Context, f *fill, data lvm.LV, blocks []uint64) ([]uint64, error) {
	picked, left := toFetch(f, f.kept, blocks, maxSwappedOutBatchBytes)
	f.copies = intoFreeBlocks(f.kept, picked, f.cacheBlocks, f.originBlocks)
	if len(f.copies) == 0 {
		return left, nil
	}
	f.restoredAhead = false
	a.faults.Reached(ctx, a.op+"/copy-swapped-out")
	return left, a.copyBlocks(ctx, f, data)
}

// toFetch picks, in origin order, the blocks read that mapped does not
// hold, as many as the free blocks and batchBytes allow. Left are those
// the free blocks had room for beyond batchBytes.
func toFetch(f *fill, mapped []dm.Mapping, blocks []uint64, batchBytes uint64) (picked, left []uint64) {
	_, held := occupied(mapped)
	free := f.cacheBlocks - min(uint64(len(mapped)), f.cacheBlocks)
	room := min(free, batchBytes/(f.blockSectors*dm.SectorSize))
	for _, b := range slices.Compact(slices.Sorted(slices.Values(blocks))) {
		switch {
		case b >= f.originBlocks || held[b]:
		case uint64(len(picked)) < room:
			picked = append(picked, b)
		case uint64(len(picked)+len(left)) < free:
			left = append(left, b)
		}
	}
	return picked, left
}
