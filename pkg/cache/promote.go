package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// smq promotes a block only once it has been read on several of its ticks,
// so a first pass over new data is served by the HDD and so, mostly, is the
// second. Promotion does in one batch what smq would do over passes: the
// blocks reads brought to a volume (dm-stats counts reads per cache block on
// the volume's device, whatever its table) are read from the origin into
// memory while the cache serves, then, with the cache swapped out for a linear table only for
// as long as writing them from memory takes, written into the cache's free
// blocks and mapped, the same way a warm-up fills a new cache. Blocks the
// cache already maps keep their place; any block written from before the
// read until the cache is back is left unmapped.

// TrackReads makes a cached volume's device count reads per cache block
// (coarser on very large volumes), so that Promote has blocks to promote;
// tracking stops when off. A volume whose cache is not live is left alone.
func (e *Engine) trackReads(ctx context.Context, volumeID string, table dm.Table, on bool) error {
	name := DeviceName(volumeID)
	live, cached := table.Target.(dm.CacheTarget)
	if !on || !cached {
		return e.dm.UntrackReads(ctx, name)
	}
	return e.dm.TrackReads(ctx, name, trackingAreaBlocks(live.BlockSectors, table.Length)*live.BlockSectors)
}

// ReadBlocks returns the cache blocks of a volume's origin read since the
// previous call, given its live table (from Health), and false when the
// volume counts no reads: it has no live cache, or one without warm-up.
func (e *Engine) ReadBlocks(ctx context.Context, volumeID string, table dm.Table) ([]uint64, bool, error) {
	live, cached := table.Target.(dm.CacheTarget)
	if !cached {
		return nil, false, nil
	}
	areas, areaSectors, err := e.dm.TakeReadAreas(ctx, DeviceName(volumeID))
	if err != nil || areaSectors == 0 {
		return nil, false, err
	}
	per, originBlocks := max(areaSectors/live.BlockSectors, 1), (table.Length+live.BlockSectors-1)/live.BlockSectors
	var blocks []uint64
	for _, a := range areas {
		for b := a * per; b < (a+1)*per && b < originBlocks; b++ {
			blocks = append(blocks, b)
		}
	}
	return blocks, true, nil
}

// Promote maps blocks (origin blocks of the live cache's block size) that
// the cache does not hold into its free blocks, and reports what it mapped
// and the blocks it left for a later promotion: those beyond the memory one
// promotion may hold (maxPromoteBytes) while the cache had room for them. A
// volume without a live writethrough cache is left alone. On a failure
// after the swap the cache comes back cold, never with a stale block, its
// hot set is deleted, and the error is returned with the blocks left.
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
	run := &applier{Engine: e, op: "promote", volumeID: volumeID, want: want, lvs: obs.cacheLVs}
	left, err := run.promote(ctx, obs.table, meta, data, blocks)
	if err != nil {
		return run.warmed, left, fmt.Errorf("promote on volume %s: %w", volumeID, err)
	}
	return run.warmed, left, nil
}

// NotHeld returns, sorted and once each, the blocks (origin blocks of the
// live cache's block size, table from Health) that the volume's cache is
// not known to hold: the promoter batches only these, so blocks mapped by
// the last fill or promotion and read again make no batch of their own.
// Without a saved hot set every block is returned; Promote skips what the
// metadata maps anyway.
func (e *Engine) NotHeld(volumeID string, table dm.Table, blocks []uint64) []uint64 {
	blocks = slices.Compact(slices.Sorted(slices.Values(blocks)))
	live, cached := table.Target.(dm.CacheTarget)
	if !cached || len(blocks) == 0 {
		return blocks // an idle volume's look reads no hot set file
	}
	held := e.heldBlocks(volumeID, live.BlockSectors, table.Length, math.MaxUint64)
	return slices.DeleteFunc(blocks, func(b uint64) bool { return held[b] })
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
// promoter no longer fills (it is full, or its reads are not counted): the
// live table is loaded again with smq, over the metadata it just committed
// when suspended, so every mapping stays. A cache already on smq, or not
// live, is left alone.
func (e *Engine) HandOver(ctx context.Context, volumeID string) error {
	obs, _, err := e.current(ctx, volumeID)
	if err != nil {
		return err
	}
	live, cached := obs.table.Target.(dm.CacheTarget)
	if !cached || live.Policy == PolicyReplacing {
		return nil
	}
	live.Policy = PolicyReplacing
	if err := e.reload(ctx, "hand-over", volumeID, dm.Table{Length: obs.table.Length, Target: live}); err != nil {
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

// maxPromoteBytes bounds the memory one promotion holds blocks in: a
// larger batch is promoted over several. Each promotion costs two table
// swaps and a metadata dump and restore (about a second and a half in the
// VM); at 128 MiB, half of the bench's 256 MiB cache goes in one.
const maxPromoteBytes = 128 << 20

// promote reads the new blocks into memory while the cache serves, swaps
// the cache out for a linear table, reads what its metadata maps, writes
// the blocks into free cache blocks and loads the cache again with old and
// new mappings. Writes are counted from before the read. It returns the
// blocks left for a later promotion (toFetch).
func (a *applier) promote(ctx context.Context, table dm.Table, meta, data lvm.LV, blocks []uint64) ([]uint64, error) {
	live, name := table.Target.(dm.CacheTarget), DeviceName(a.volumeID)
	w := newWarming(live.BlockSectors, data.Size/(live.BlockSectors*dm.SectorSize), table.Length)
	w.saveMapped = true
	picked, left := a.toFetch(w, blocks)
	f := fetched{blocks: picked, blockBytes: w.blockSectors * dm.SectorSize}
	if len(f.blocks) == 0 {
		return nil, nil // all known to be mapped, or no room
	}
	if err := a.fetch(ctx, w, &f); err != nil {
		return nil, err
	}
	swapped := time.Now()
	if err := a.reload(ctx, a.op, a.volumeID, linearTable(a.want)); err != nil {
		return nil, errors.Join(err, a.dm.Untrack(ctx, name, w.region))
	}
	defer func() { a.warmed.Uncached = time.Since(swapped) }()
	md, err := a.metadata.Dump(ctx, meta.Path)
	if err == nil {
		w.kept = cleanMappings(md.Mappings)
		w.copies = intoFreeBlocks(w.kept, f.blocks, w.cacheBlocks, w.originBlocks)
		err = a.writeFetched(ctx, w, data, f)
	}
	if err != nil {
		w.kept, w.copies = nil, nil // what the metadata maps is not known
	}
	a.warming = w
	if err := a.loadWarm(ctx, table, meta); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCacheLeftOut, err)
	}
	if err != nil {
		// The saved hot set says the cache holds blocks it no longer maps:
		// kept, later promotions would skip them.
		if a.hotSets != nil {
			err = errors.Join(err, a.hotSets.Delete(a.volumeID))
		}
		return left, fmt.Errorf("%w; the cache came back cold", err)
	}
	return left, nil
}

// fetched are origin blocks read into memory, block i of blocks at
// i*blockBytes of buf.
type fetched struct {
	blocks     []uint64
	blockBytes uint64
	buf        []byte
}

// toFetch picks, in origin order, the blocks read that the cache is not
// known to hold (its hot set, saved at the last fill or promotion; blocks
// smq promoted since are found mapped after the swap and skipped), as many
// as the free blocks and maxPromoteBytes allow. Left are those the free
// blocks had room for beyond maxPromoteBytes.
func (a *applier) toFetch(w *warming, blocks []uint64) (picked, left []uint64) {
	known := a.heldBlocks(a.volumeID, w.blockSectors, w.originBlocks*w.blockSectors, w.cacheBlocks)
	free := w.cacheBlocks - min(uint64(len(known)), w.cacheBlocks)
	room := min(free, maxPromoteBytes/(w.blockSectors*dm.SectorSize))
	for _, b := range slices.Compact(slices.Sorted(slices.Values(blocks))) {
		switch {
		case b >= w.originBlocks || known[b]:
		case uint64(len(picked)) < room:
			picked = append(picked, b)
		case uint64(len(picked)+len(left)) < free:
			left = append(left, b)
		}
	}
	return picked, left
}

// fetch starts counting writes (underWriteTracking) and reads f's blocks
// from the origin while the cache serves: a writethrough origin holds every
// completed write, and reading it directly leaves the volume's read
// counters, its tracked reads and smq's statistics to the application.
func (a *applier) fetch(ctx context.Context, w *warming, f *fetched) error {
	return a.underWriteTracking(ctx, w, func() error {
		start := time.Now()
		f.buf = blockdev.DirectBuffer(uint64(len(f.blocks)) * f.blockBytes)
		var ex []blockdev.Extent
		for i, b := range f.blocks {
			ex = appendExtent(ex, b*f.blockBytes, uint64(i)*f.blockBytes, f.blockBytes)
		}
		if err := a.dev.ReadExtents(ctx, a.want.origin, ex, f.buf); err != nil {
			return err
		}
		klog.V(2).InfoS("Read the blocks to promote from the origin", "volumeID", a.volumeID, "blocks", len(f.blocks), "extents", len(ex), "duration", time.Since(start))
		return nil
	})
}

// writeFetched writes the fetched blocks w's copies map into the cache data LV.
func (a *applier) writeFetched(ctx context.Context, w *warming, data lvm.LV, f fetched) error {
	a.faults.Reached(ctx, a.op+"/copy-hot-set")
	var ex []blockdev.Extent
	for _, m := range w.copies {
		i, _ := slices.BinarySearch(f.blocks, m.Origin) // copies come from f.blocks
		ex = appendExtent(ex, uint64(i)*f.blockBytes, m.Cache*f.blockBytes, f.blockBytes)
	}
	start := time.Now()
	if err := a.dev.WriteExtents(ctx, data.Path, data.DevNum, ex, f.buf); err != nil {
		return err
	}
	klog.V(2).InfoS("Wrote the blocks read into the cache", "volumeID", a.volumeID, "blocks", len(w.copies), "extents", len(ex), "duration", time.Since(start))
	return nil
}

// cleanMappings keeps the mappings a writethrough cache may hold: a dirty
// one would mean the metadata is not what this cache wrote.
func cleanMappings(ms []dm.Mapping) []dm.Mapping {
	return slices.DeleteFunc(slices.Clone(ms), func(m dm.Mapping) bool { return m.Dirty })
}

// intoFreeBlocks assigns the wanted origin blocks below originBlocks that
// kept does not map, in origin order, to the cache blocks kept leaves free.
func intoFreeBlocks(kept []dm.Mapping, wanted []uint64, cacheBlocks, originBlocks uint64) []dm.Mapping {
	usedCache, mappedOrigin := map[uint64]bool{}, map[uint64]bool{}
	for _, m := range kept {
		usedCache[m.Cache], mappedOrigin[m.Origin] = true, true
	}
	wanted = slices.Compact(slices.Sorted(slices.Values(wanted)))
	var copies []dm.Mapping
	next := uint64(0)
	for _, b := range wanted {
		if b >= originBlocks || mappedOrigin[b] {
			continue
		}
		for next < cacheBlocks && usedCache[next] {
			next++
		}
		if next == cacheBlocks {
			break
		}
		copies = append(copies, dm.Mapping{Cache: next, Origin: b})
		next++
	}
	return copies
}
