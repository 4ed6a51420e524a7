package cache

import (
	"context"
	"errors"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A volume's hot set is the origin blocks its cache held when the cache
// last went (unstage, resize, detach, or, after a crash, the metadata the
// next attach finds). A new cache of the volume is filled with them before
// its table goes live: the blocks are copied from the origin into the data
// LV in origin order, so the HDD reads sequentially, and cache_restore
// writes clean mappings for them. The invariant that keeps this safe is
// that no block is mapped unless the cache holds what the origin holds at
// the moment the table goes live: dm-stats counts every write through the
// volume's device from before the copy until the device is suspended for
// the load, and a block written meanwhile is left unmapped. The set is
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

// warming is a fill of a cache between the copy and the load of its table.
type warming struct {
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

func newWarming(blockSectors, cacheBlocks, lengthSectors, maxAreas uint64) *warming {
	return &warming{blockSectors: blockSectors, cacheBlocks: cacheBlocks, originBlocks: lengthSectors / blockSectors,
		areaBlocks: trackingAreaBlocks(blockSectors, lengthSectors, maxAreas), start: time.Now()}
}

// trackingAreaBlocks is how many cache blocks one dm-stats area covers: one,
// unless the device has more blocks than maxAreas (dm.TrackedAreasFor).
func trackingAreaBlocks(blockSectors, lengthSectors, maxAreas uint64) uint64 {
	blocks := (lengthSectors + blockSectors - 1) / blockSectors
	return max(1, (blocks+maxAreas-1)/max(maxAreas, 1))
}

func (w *warming) areaSectors() uint64 { return w.areaBlocks * w.blockSectors }

// trackingAreaSectors is the area of a write count on a volume of
// lengthSectors for cache blocks of blockSectors: a warm-up's, a pause's
// and a restage's count alike, so a resume reads any of them by block.
func (e *Engine) trackingAreaSectors(blockSectors, lengthSectors uint64) uint64 {
	return trackingAreaBlocks(blockSectors, lengthSectors, e.trackedAreas) * blockSectors
}

func (w *warming) cacheBytes() uint64 { return w.cacheBlocks * w.blockSectors * dm.SectorSize }

// saveHotSet reads which origin blocks the volume's idle cache metadata
// maps and keeps them as the volume's hot set. It never fails the change:
// metadata that cannot be read (zeroed, never loaded, on a failing device)
// leaves the set saved earlier in place.
func (a *applier) saveHotSet(ctx context.Context) {
	if a.hotSets == nil {
		return
	}
	meta, ok := activeLV(a.lvs, lvm.RoleCacheMetadata)
	if !ok {
		return
	}
	md, err := a.metadata.Dump(ctx, meta.Path)
	if err != nil {
		klog.InfoS("Kept the previous hot set: the cache metadata could not be read", "volumeID", a.volumeID, "err", err)
		return
	}
	a.idleMetadata = &md
	if len(md.Mappings) > 0 {
		a.saveMappings(md)
	}
}

// saveMappings keeps the origin blocks md maps as the volume's hot set.
func (a *applier) saveMappings(md dm.CacheMetadata) {
	blocks := make([]uint64, len(md.Mappings))
	for i, m := range md.Mappings {
		blocks[i] = m.Origin
	}
	set := hotset.FromBlocks(blocks, md.BlockSectors)
	if err := a.hotSets.Save(a.volumeID, set); err != nil {
		klog.ErrorS(err, "Could not save the hot set", "volumeID", a.volumeID)
		return
	}
	klog.InfoS("Saved hot set", "volumeID", a.volumeID, "blocks", len(blocks), "bytes", set.Sectors()*dm.SectorSize)
}

func activeLV(lvs []lvm.LV, role lvm.Role) (lvm.LV, bool) {
	i := slices.IndexFunc(lvs, func(lv lvm.LV) bool { return lv.Role() == role && lv.Path != "" && !lv.DevNum.IsZero() })
	if i < 0 {
		return lvm.LV{}, false
	}
	return lvs[i], true
}

// warm copies the volume's hot set, as much as the new cache holds, from
// the origin into the cache data LV while the volume serves on its linear
// table, and leaves the mappings to loadWarm. Any failure leaves the cache
// to start cold; the error is that of making its metadata empty again.
func (a *applier) warm(ctx context.Context) error {
	if a.hotSets == nil {
		return nil
	}
	set, ok, err := a.hotSets.Load(a.volumeID)
	if err != nil || !ok {
		if err != nil {
			klog.ErrorS(err, "Could not read the hot set; the cache starts cold", "volumeID", a.volumeID)
		}
		return nil
	}
	meta, data, err := a.pair()
	if err != nil {
		return nil // load-cache reports it
	}
	bs := a.want.blockSectors()
	w := newWarming(bs, data.Size/(bs*dm.SectorSize), a.want.length, a.trackedAreas)
	limit := w.cacheBlocks
	if l := a.want.cache.WarmLimitBytes; l > 0 {
		limit = min(limit, l/(bs*dm.SectorSize))
	}
	for i, b := range set.Blocks(w.blockSectors, a.want.length, limit) {
		w.copies = append(w.copies, dm.Mapping{Cache: uint64(i), Origin: b})
	}
	if len(w.copies) == 0 {
		return nil // nothing saved, or a limit below one block
	}
	fc := fillControlOf(ctx)
	copyCtx, stop := fc.stoppable(ctx)
	defer stop()
	copyCtx, cancel := context.WithTimeout(copyCtx, warmDeadline(uint64(len(w.copies))*bs*dm.SectorSize))
	defer cancel()
	if err := a.copyHotBlocks(copyCtx, w, meta, data); err != nil {
		if a.warmed.Stopped = fc.stopped() && ctx.Err() == nil; a.warmed.Stopped {
			klog.InfoS("Stopped filling the cache from the hot set; it starts cold", "volumeID", a.volumeID)
		} else {
			klog.ErrorS(err, "Could not fill the cache from the hot set; it starts cold", "volumeID", a.volumeID)
		}
		// The mappings written beside the copy, whole or cut short, name
		// blocks the cache does not hold.
		return a.zeroMetadata(meta)
	}
	a.warming = w
	return nil
}

// A warm-up copies at least minWarmBytesPerSecond, a slow HDD's pace while
// the application reads beside it; one that does not (a hung disk) gives
// up after warmDeadline, and the cache starts cold instead of holding the
// volume's lock, and its binding's worker, for ever.
const (
	minWarmBytesPerSecond = 10 << 20
	warmMargin            = 5 * time.Minute
)

func warmDeadline(bytes uint64) time.Duration {
	return warmMargin + time.Duration(bytes/minWarmBytesPerSecond)*time.Second
}

// copyHotBlocks copies the hot set under write tracking. Meanwhile it
// writes metadata mapping every copied block into the new cache's metadata
// LV, which no table uses yet, so that loadWarm writes it again, with the
// volume suspended, only when a block was written during the copy.
func (a *applier) copyHotBlocks(ctx context.Context, w *warming, meta, data lvm.LV) error {
	return a.underWriteTracking(ctx, w, func() error {
		var g errgroup.Group
		g.Go(func() error { return a.copyBlocks(ctx, w, data) })
		g.Go(func() error {
			a.restoreAhead(ctx, w, meta)
			return nil
		})
		return g.Wait()
	})
}

// restoreAhead writes w's metadata as if no block were written during the
// copy; a failure only leaves the writing to loadWarm.
func (a *applier) restoreAhead(ctx context.Context, w *warming, meta lvm.LV) {
	start := time.Now()
	md, _ := w.metadata(nil)
	if err := a.metadata.Restore(ctx, meta.Path, md); err != nil {
		klog.V(2).InfoS("Could not write the warm-up's mappings during the copy; they are written at the load", "volumeID", a.volumeID, "err", err)
		return
	}
	w.restoredAhead = true
	klog.V(2).InfoS("Wrote the warm-up's mappings", "volumeID", a.volumeID, "blocks", len(md.Mappings), "duration", time.Since(start))
}

// underWriteTracking starts counting writes and runs copyIn, which reads
// blocks whose later writes the count must see. No write in flight escapes
// the count: the kernel's @stats_create suspends the device internally and
// waits for every I/O in flight to complete before the region counts (so
// that "newly created statistics will be exact", dm-stats.c). On failure
// the tracking stops again.
func (a *applier) underWriteTracking(ctx context.Context, w *warming, copyIn func() error) error {
	name := DeviceName(a.volumeID)
	region, err := a.dm.TrackWrites(ctx, name, w.areaSectors())
	if err != nil {
		return err
	}
	w.region = region
	a.faults.Reached(ctx, a.op+"/copy")
	if err := copyIn(); err != nil {
		// A copy stopped by ctx must not leave the region counting.
		return errors.Join(err, a.dm.Untrack(context.WithoutCancel(ctx), name, region))
	}
	return nil
}

// copyBlocks copies w's copies from the origin into the cache data LV.
// Reading the origin directly leaves the volume's read counters, its
// tracked reads and smq's statistics to the application.
func (a *applier) copyBlocks(ctx context.Context, w *warming, data lvm.LV) error {
	start, extents := time.Now(), extentsOf(w.copies, w.blockSectors)
	if fc := fillControlOf(ctx); w.saveMapped || fc.Progress == nil {
		if err := a.dev.CopyExtents(ctx, a.want.origin, data.Path, data.DevNum, extents); err != nil {
			return err
		}
	} else if err := a.copyReportingProgress(ctx, extents, data, fc); err != nil {
		return err
	}
	what := "Copied the hot set"
	if w.saveMapped {
		what = "Copied the blocks read"
	}
	klog.V(2).InfoS(what, "volumeID", a.volumeID, "blocks", len(w.copies), "extents", len(extents), "duration", time.Since(start))
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

// loadWarm loads the cache table with the kept and copied blocks mapped.
// With the device suspended, no write can reach the origin: the blocks
// written since the tracking began are dropped from the mappings, which
// cache_restore then writes (a warm-up wrote them during its copy, and
// writes them again only without such blocks). If that fails, the
// metadata is zeroed again and the cache starts cold.
func (a *applier) loadWarm(ctx context.Context, table dm.Table, meta lvm.LV) error {
	w, name := a.warming, DeviceName(a.volumeID)
	a.warming = nil
	defer a.untrack(ctx, w)
	var mapped dm.CacheMetadata
	err := a.reloadWith(ctx, a.op, a.volumeID, table, func(ctx context.Context) error {
		written, err := a.dm.WrittenAreas(ctx, name, w.region)
		if err == nil {
			md, report := w.metadata(written)
			if !w.restoredAhead || report.Dropped > 0 {
				err = a.metadata.Restore(ctx, meta.Path, md)
			}
			report.Dropped += w.droppedAhead
			if err == nil {
				report.Duration = time.Since(w.start)
				a.warmed, mapped = report, md
				if w.saveMapped {
					return nil // a promotion: the promoter reports it
				}
				what := "Filled the cache from the hot set"
				if len(w.copies) == 0 {
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
	case !w.saveMapped:
	case len(mapped.Mappings) > 0:
		a.saveMappings(mapped)
	case a.hotSets != nil:
		// The cache came back cold (its mappings could not be written, or
		// every block was written meanwhile): a hot set kept would make
		// later promotions skip blocks it no longer maps.
		if err := a.hotSets.Delete(a.volumeID); err != nil {
			klog.ErrorS(err, "Could not delete the hot set of a cache that came back cold", "volumeID", a.volumeID)
		}
	}
	return nil
}

// writtenIn tells whether a mapping's origin block lies in one of the
// written tracking areas.
func (w *warming) writtenIn(written []uint64) func(dm.Mapping) bool {
	written = slices.Sorted(slices.Values(written))
	return func(m dm.Mapping) bool {
		_, hit := slices.BinarySearch(written, m.Origin/w.areaBlocks)
		return hit
	}
}

// metadata maps the kept and copied blocks that saw no write.
func (w *warming) metadata(written []uint64) (dm.CacheMetadata, WarmReport) {
	md := dm.CacheMetadata{BlockSectors: w.blockSectors, CacheBlocks: w.cacheBlocks, Policy: PolicyReplacing}
	isWritten := w.writtenIn(written)
	var r WarmReport
	for i, m := range slices.Concat(w.kept, w.copies) {
		if isWritten(m) && (i >= len(w.kept) || !w.keptServed) {
			r.Dropped++
			continue
		}
		md.Mappings = append(md.Mappings, dm.Mapping{Cache: m.Cache, Origin: m.Origin})
		if i < len(w.kept) {
			r.Kept++
		} else {
			r.Blocks++
		}
	}
	r.Bytes = r.Blocks * w.blockSectors * dm.SectorSize
	return md, r
}

// ForgetHotSet deletes a volume's hot set: its volume or binding is gone.
func (e *Engine) ForgetHotSet(volumeID string) error {
	if e.hotSets == nil {
		return nil
	}
	return e.hotSets.Delete(volumeID)
}
