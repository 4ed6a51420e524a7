package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A fill puts blocks into a cache before a table maps them. It is the one
// way ssdcache fills a cache (smq fills it on its own); its entries say
// only what to keep and what to copy:
//   - the warm-up of a new cache copies the volume's hot set (warm.go);
//   - the kept path copies nothing and maps again what a paused or cleanly
//     unstaged cache held, its writes counted since the cache went out
//     (kept.go);
//   - a promotion copies the blocks reads brought into the free blocks of a
//     live cache (promote.go), and maps them over a second metadata LV
//     while the cache serves where it can (metaswap.go);
//   - a preload copies the blocks of named files, by promotion (preload.go).
//
// A fill counts the writes through the volume's device from before its
// copy (underWriteTracking), copies the blocks from the origin into free
// blocks of the cache data LV (copyBlocks; every entry lists them in origin
// order, so the HDD reads sequentially), then drops the blocks written
// meanwhile and writes clean mappings for the rest (metadata, loadFilled).
// The invariant that keeps this safe is that no block is mapped unless the
// cache holds what the origin holds at the moment the table goes live: the
// count runs until the device is suspended for the load, and a block
// written meanwhile is left unmapped, unless a live cache served it
// throughout (writethrough wrote both copies: keptServed). What to copy is
// only a hint; a stale one costs copying time, never a wrong byte.

// WarmReport says how a cache was filled: from the volume's hot set when it
// was attached, or with the blocks reads brought when they were promoted.
type WarmReport struct {
	// Blocks were copied from the origin and mapped, Bytes in all.
	Blocks, Bytes uint64
	// Kept were mapped before a promotion or a pause and stay mapped: they
	// were not read from the origin.
	Kept uint64
	// Dropped were copied or kept but written meanwhile, and left unmapped.
	Dropped uint64
	// Duration is from the start of the copy to the mappings being written.
	Duration time.Duration
	// Uncached is how long a promotion had the cache swapped out, the
	// volume serving from its origin alone.
	Uncached time.Duration
	// Suspended is how long a promotion that swapped the metadata kept the
	// device suspended to load its table over the new metadata: the
	// volume's I/O waited meanwhile, and was then served by the cache.
	Suspended time.Duration
	// CopiedWhileServing: a promotion copied while the cache served (the
	// engine knew which blocks it maps), not with the cache swapped out.
	CopiedWhileServing bool
	// Stopped: the caller stopped the fill (FillControl.Stop) and the cache
	// started cold.
	Stopped bool
}

// fill is a fill of a cache between the copy and the load of its table.
type fill struct {
	region       uint64 // dm-stats region counting writes per tracking area
	blockSectors uint64
	areaBlocks   uint64 // cache blocks per tracking area
	cacheBlocks  uint64
	originBlocks uint64       // the origin's whole cache blocks: dm-cache never caches a partial last one
	kept         []dm.Mapping // mapped before; their cache blocks hold them
	copies       []dm.Mapping // to copy from the origin
	start        time.Time
	// saveMapped keeps what ends up mapped as the hot set.
	saveMapped bool
	// restoredAhead: the metadata LV maps every kept and copied block.
	restoredAhead bool
	// keptServed: the cache served the kept blocks throughout, so a write
	// reached both copies (writethrough) and leaves them mapped; only a
	// table without them (linear) in between makes a written one stale.
	keptServed bool
	// droppedAhead were kept but left out before the load, as written.
	droppedAhead uint64
}

func newFill(blockSectors, cacheBlocks, lengthSectors, maxAreas uint64) *fill {
	return &fill{blockSectors: blockSectors, cacheBlocks: cacheBlocks, originBlocks: lengthSectors / blockSectors,
		areaBlocks: trackingAreaBlocks(blockSectors, lengthSectors, maxAreas), start: time.Now()}
}

// trackingAreaBlocks is how many cache blocks one dm-stats area covers: one,
// unless the device has more blocks than maxAreas (dm.TrackedAreasFor).
func trackingAreaBlocks(blockSectors, lengthSectors, maxAreas uint64) uint64 {
	blocks := (lengthSectors + blockSectors - 1) / blockSectors
	return max(1, (blocks+maxAreas-1)/max(maxAreas, 1))
}

func (f *fill) areaSectors() uint64 { return f.areaBlocks * f.blockSectors }

// trackingAreaSectors is the area of a write count on a volume of
// lengthSectors for cache blocks of blockSectors: a warm-up's, a pause's
// and a restage's count alike, so a resume reads any of them by block.
func (e *Engine) trackingAreaSectors(blockSectors, lengthSectors uint64) uint64 {
	return trackingAreaBlocks(blockSectors, lengthSectors, e.trackedAreas) * blockSectors
}

func (f *fill) cacheBytes() uint64 { return f.cacheBlocks * f.blockSectors * dm.SectorSize }

// underWriteTracking starts counting writes and runs copyIn, which reads
// blocks whose later writes the count must see. No write in flight escapes
// the count: the kernel's @stats_create suspends the device internally and
// waits for every I/O in flight to complete before the region counts (so
// that "newly created statistics will be exact", dm-stats.c). On failure
// the tracking stops again.
func (a *applier) underWriteTracking(ctx context.Context, f *fill, copyIn func() error) error {
	name := DeviceName(a.volumeID)
	region, err := a.dm.TrackWrites(ctx, name, f.areaSectors())
	if err != nil {
		return err
	}
	f.region = region
	a.faults.Reached(ctx, a.op+"/copy")
	if err := copyIn(); err != nil {
		// A copy stopped by ctx must not leave the region counting.
		return errors.Join(err, a.dm.Untrack(context.WithoutCancel(ctx), name, region))
	}
	return nil
}

// copyBlocks copies f's copies from the origin into the cache data LV.
// Reading the origin directly leaves the volume's read counters, its
// tracked reads and smq's statistics to the application.
func (a *applier) copyBlocks(ctx context.Context, f *fill, data lvm.LV) error {
	start, extents := time.Now(), extentsOf(f.copies, f.blockSectors)
	if fc := fillControlOf(ctx); f.saveMapped || fc.Progress == nil {
		if err := a.dev.CopyExtents(ctx, a.want.origin, data.Path, data.DevNum, extents); err != nil {
			return err
		}
	} else if err := a.copyReportingProgress(ctx, extents, data, fc); err != nil {
		return err
	}
	what := "Copied the hot set"
	if f.saveMapped {
		what = "Copied the blocks read"
	}
	klog.V(2).InfoS(what, "volumeID", a.volumeID, "blocks", len(f.copies), "extents", len(extents), "duration", time.Since(start))
	return nil
}

// copyReportingProgress copies a warm-up's extents in parts, reporting
// the bytes copied after each, and checks for a stop between them.
func (a *applier) copyReportingProgress(ctx context.Context, extents []blockdev.Extent, data lvm.LV, fc FillControl) error {
	var total, copied uint64
	for _, e := range extents {
		total += e.Length
	}
	for _, part := range inParts(extents, progressPartBytes) {
		if fc.stopped() {
			return errFillStopped
		}
		if err := a.dev.CopyExtents(ctx, a.want.origin, data.Path, data.DevNum, part); err != nil {
			return err
		}
		for _, e := range part {
			copied += e.Length
		}
		fc.Progress(copied, total)
	}
	return nil
}

// extentsOf coalesces the copies of origin blocks into their cache blocks.
func extentsOf(copies []dm.Mapping, blockSectors uint64) []blockdev.Extent {
	size := blockSectors * dm.SectorSize
	var ex []blockdev.Extent
	for _, m := range copies {
		ex = appendExtent(ex, m.Origin*size, m.Cache*size, size)
	}
	return ex
}

// appendExtent adds a range to ex, extending the last extent when the two
// are contiguous on both sides.
func appendExtent(ex []blockdev.Extent, src, dst, size uint64) []blockdev.Extent {
	if n := len(ex); n > 0 && ex[n-1].Src+ex[n-1].Length == src && ex[n-1].Dst+ex[n-1].Length == dst {
		ex[n-1].Length += size
		return ex
	}
	return append(ex, blockdev.Extent{Src: src, Dst: dst, Length: size})
}

// restoreAhead writes f's metadata as if no block were written during the
// copy; a failure only leaves the writing to loadFilled.
func (a *applier) restoreAhead(ctx context.Context, f *fill, meta lvm.LV) {
	start := time.Now()
	md, _ := f.metadata(nil)
	if err := a.metadata.Restore(ctx, meta.Path, md); err != nil {
		klog.V(2).InfoS("Could not write the warm-up's mappings during the copy; they are written at the load", "volumeID", a.volumeID, "err", err)
		return
	}
	f.restoredAhead = true
	klog.V(2).InfoS("Wrote the warm-up's mappings", "volumeID", a.volumeID, "blocks", len(md.Mappings), "duration", time.Since(start))
}

// loadFilled loads the cache table with the fill's kept and copied blocks
// mapped. With the device suspended, no write can reach the origin: the
// blocks written since the tracking began are dropped from the mappings,
// which cache_restore then writes (a warm-up wrote them during its copy,
// and writes them again only without such blocks). If that fails, the
// metadata is zeroed again and the cache starts cold.
func (a *applier) loadFilled(ctx context.Context, table dm.Table, meta lvm.LV) error {
	f, name := a.filling, DeviceName(a.volumeID)
	a.filling = nil
	defer a.untrack(ctx, f)
	var mapped dm.CacheMetadata
	err := a.reloadWith(ctx, a.op, a.volumeID, table, func(ctx context.Context) error {
		written, err := a.dm.WrittenAreas(ctx, name, f.region)
		if err == nil {
			md, report := f.metadata(written)
			if !f.restoredAhead || report.Dropped > 0 {
				err = a.metadata.Restore(ctx, meta.Path, md)
			}
			report.Dropped += f.droppedAhead
			if err == nil {
				report.Duration = time.Since(f.start)
				a.warmed, mapped = report, md
				if f.saveMapped {
					return nil // a promotion: the promoter reports it
				}
				what := "Filled the cache from the hot set"
				if len(f.copies) == 0 {
					what = "Mapped the kept cache blocks again" // mapKept: nothing copied
				}
				klog.InfoS(what, "volumeID", a.volumeID, "operation", a.op, "blocks", report.Blocks,
					"bytes", report.Bytes, "kept", report.Kept, "writtenMeanwhile", report.Dropped, "duration", report.Duration)
				return nil
			}
		}
		klog.ErrorS(err, "Could not map the copied hot set; the cache starts cold", "volumeID", a.volumeID)
		return a.zeroMetadata(meta)
	})
	if err != nil {
		return err
	}
	a.layouts.loaded(a.volumeID, table, mapped.Mappings)
	switch {
	case !f.saveMapped:
	case len(mapped.Mappings) > 0:
		a.saveMappings(mapped)
	default:
		// The cache came back cold (its mappings could not be written, or
		// every block was written meanwhile): a hot set kept would make
		// later promotions skip blocks it no longer maps.
		a.forgetHotSetOfColdCache()
	}
	return nil
}

// writtenIn tells whether a mapping's origin block lies in one of the
// written tracking areas.
func (f *fill) writtenIn(written []uint64) func(dm.Mapping) bool {
	written = slices.Sorted(slices.Values(written))
	return func(m dm.Mapping) bool {
		_, hit := slices.BinarySearch(written, m.Origin/f.areaBlocks)
		return hit
	}
}

// metadata maps the kept and copied blocks that saw no write.
func (f *fill) metadata(written []uint64) (dm.CacheMetadata, WarmReport) {
	md := dm.CacheMetadata{BlockSectors: f.blockSectors, CacheBlocks: f.cacheBlocks, Policy: PolicyReplacing}
	isWritten := f.writtenIn(written)
	var r WarmReport
	for i, m := range slices.Concat(f.kept, f.copies) {
		if isWritten(m) && (i >= len(f.kept) || !f.keptServed) {
			r.Dropped++
			continue
		}
		md.Mappings = append(md.Mappings, dm.Mapping{Cache: m.Cache, Origin: m.Origin})
		if i < len(f.kept) {
			r.Kept++
		} else {
			r.Blocks++
		}
	}
	r.Bytes = r.Blocks * f.blockSectors * dm.SectorSize
	return md, r
}

// copyAreas are the tracking areas of f's copies, sorted, each once.
func (f *fill) copyAreas() []uint64 {
	areas := make([]uint64, len(f.copies))
	for i, c := range f.copies {
		areas[i] = c.Origin / f.areaBlocks
	}
	return slices.Compact(slices.Sorted(slices.Values(areas)))
}

// dropWrittenCopies leaves out of f's copies those in written tracking
// areas and returns how many.
func (f *fill) dropWrittenCopies(written []uint64) uint64 {
	before := len(f.copies)
	f.copies = slices.DeleteFunc(f.copies, f.writtenIn(written))
	return uint64(before - len(f.copies))
}

// dropWrittenKept leaves out of f's kept blocks those in written tracking
// areas and returns how many.
func (f *fill) dropWrittenKept(written []uint64) uint64 {
	before := len(f.kept)
	f.kept = slices.DeleteFunc(f.kept, f.writtenIn(written))
	return uint64(before - len(f.kept))
}

// untrack stops counting the writes of f's copy (a warm-up's or a
// promotion's).
func (a *applier) untrack(ctx context.Context, f *fill) {
	if err := a.dm.Untrack(context.WithoutCancel(ctx), DeviceName(a.volumeID), f.region); err != nil {
		klog.ErrorS(err, "Could not delete the dm-stats region of a copy", "volumeID", a.volumeID, "operation", a.op, "region", f.region)
	}
}

// intoFreeBlocks assigns the wanted origin blocks below originBlocks that
// kept does not map, in origin order, to the cache blocks kept leaves free.
func intoFreeBlocks(kept []dm.Mapping, wanted []uint64, cacheBlocks, originBlocks uint64) []dm.Mapping {
	usedCache, mappedOrigin := occupied(kept)
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

// copiesIntoFree checks that the copies went into cache blocks the
// metadata leaves free, for origin blocks it does not map. A table on
// PolicyFilling maps no block of its own, so anything else means the
// cache's layout was not the one this engine loaded: found only after the
// copy, when reads may have met a copied block, and so never expected.
func copiesIntoFree(mapped, copies []dm.Mapping) error {
	usedCache, mappedOrigin := occupied(mapped)
	for _, c := range copies {
		if usedCache[c.Cache] || mappedOrigin[c.Origin] {
			return fmt.Errorf("origin block %d was copied into cache block %d while the cache served, but its metadata maps that cache block or origin block: its layout was not the one loaded", c.Origin, c.Cache)
		}
	}
	return nil
}

// occupied are the cache blocks and the origin blocks that mappings use.
func occupied(ms []dm.Mapping) (cacheBlocks, originBlocks map[uint64]bool) {
	cacheBlocks, originBlocks = make(map[uint64]bool, len(ms)), make(map[uint64]bool, len(ms))
	for _, m := range ms {
		cacheBlocks[m.Cache], originBlocks[m.Origin] = true, true
	}
	return cacheBlocks, originBlocks
}

// cleanMappings keeps the mappings a writethrough cache may hold: a dirty
// one would mean the metadata is not what this cache wrote.
func cleanMappings(ms []dm.Mapping) []dm.Mapping {
	return slices.DeleteFunc(slices.Clone(ms), func(m dm.Mapping) bool { return m.Dirty })
}

// dirtyMappings counts the mappings cleanMappings leaves out.
func dirtyMappings(ms []dm.Mapping) int {
	n := 0
	for _, m := range ms {
		if m.Dirty {
			n++
		}
	}
	return n
}
