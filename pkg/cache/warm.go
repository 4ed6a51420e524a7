package cache

import (
	"context"
	"errors"
	"slices"
	"time"

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

// WarmReport says how a new cache was filled from its volume's hot set.
type WarmReport struct {
	// Blocks were copied from the origin and mapped, Bytes in all.
	Blocks, Bytes uint64
	// Dropped were copied but written during the copy, and left unmapped.
	Dropped uint64
	// Duration is from the start of the copy to the mappings being written.
	Duration time.Duration
}

// warming is a copy of the hot set between stepWarm and stepLoadCache.
type warming struct {
	region       uint64 // dm-stats region counting writes per cache block
	blockSectors uint64
	cacheBlocks  uint64
	blocks       []uint64 // origin blocks; cache block i holds blocks[i]
	start        time.Time
}

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
	if len(md.Mappings) == 0 {
		return
	}
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
// to start cold.
func (a *applier) warm(ctx context.Context) {
	if a.hotSets == nil {
		return
	}
	set, ok, err := a.hotSets.Load(a.volumeID)
	if err != nil || !ok {
		if err != nil {
			klog.ErrorS(err, "Could not read the hot set; the cache starts cold", "volumeID", a.volumeID)
		}
		return
	}
	_, data, err := a.pair()
	if err != nil {
		return
	}
	w := &warming{blockSectors: dm.BlockSectorsFor(a.want.cache.SizeBytes), start: time.Now()}
	w.cacheBlocks = data.Size / (w.blockSectors * dm.SectorSize)
	if w.blocks = set.Blocks(w.blockSectors, a.want.length, w.cacheBlocks); len(w.blocks) == 0 {
		return
	}
	if err := a.copyHotBlocks(ctx, w, data); err != nil {
		klog.ErrorS(err, "Could not fill the cache from the hot set; it starts cold", "volumeID", a.volumeID)
		return
	}
	a.warming = w
}

// copyHotBlocks starts counting writes, waits out the writes already in
// flight (a suspend returns once they completed), and copies.
func (a *applier) copyHotBlocks(ctx context.Context, w *warming, data lvm.LV) error {
	name := DeviceName(a.volumeID)
	region, err := a.dm.TrackWrites(ctx, name, w.blockSectors)
	if err != nil {
		return err
	}
	w.region = region
	err = a.drain(ctx, name)
	if err == nil {
		a.faults.Reached(ctx, a.op+"/copy-hot-set")
		start, extents := time.Now(), extentsOf(w.blocks, w.blockSectors)
		if err = a.dev.CopyExtents(ctx, DevicePath(a.volumeID), data.Path, data.DevNum, extents); err == nil {
			klog.V(2).InfoS("Copied the hot set", "volumeID", a.volumeID, "blocks", len(w.blocks), "extents", len(extents), "duration", time.Since(start))
		}
	}
	if err != nil {
		return errors.Join(err, a.dm.UntrackWrites(ctx, name, region))
	}
	return nil
}

// drain suspends and resumes the device: the suspend returns once every
// write in flight has completed.
func (a *applier) drain(ctx context.Context, name string) error {
	if err := a.dm.Suspend(ctx, name); err != nil {
		return errors.Join(err, a.rollback(ctx, name))
	}
	if err := a.dm.Resume(ctx, name); err != nil {
		return errors.Join(err, a.rollback(ctx, name))
	}
	return nil
}

// extentsOf coalesces the copies of origin blocks into cache blocks 0, 1, ...
func extentsOf(blocks []uint64, blockSectors uint64) []blockdev.Extent {
	size := blockSectors * dm.SectorSize
	var ex []blockdev.Extent
	for i, b := range blocks {
		src, dst := b*size, uint64(i)*size
		if n := len(ex); n > 0 && ex[n-1].Src+ex[n-1].Length == src && ex[n-1].Dst+ex[n-1].Length == dst {
			ex[n-1].Length += size
			continue
		}
		ex = append(ex, blockdev.Extent{Src: src, Dst: dst, Length: size})
	}
	return ex
}

// loadWarm loads the cache table with the copied blocks mapped. With the
// device suspended, no write can reach the origin: the blocks written since
// the copy began are dropped from the mappings, which cache_restore then
// writes. If that fails, the metadata is zeroed again and the cache starts
// cold.
func (a *applier) loadWarm(ctx context.Context, table dm.Table, meta lvm.LV) error {
	w, name := a.warming, DeviceName(a.volumeID)
	a.warming = nil
	defer func() {
		if err := a.dm.UntrackWrites(ctx, name, w.region); err != nil {
			klog.ErrorS(err, "Could not delete the dm-stats region of a warm-up", "volumeID", a.volumeID, "region", w.region)
		}
	}()
	return a.reloadWith(ctx, a.op, a.volumeID, table, func(ctx context.Context) error {
		written, err := a.dm.WrittenAreas(ctx, name, w.region)
		if err == nil {
			md := w.metadata(written)
			if err = a.metadata.Restore(ctx, meta.Path, md); err == nil {
				a.warmed = w.report(len(md.Mappings))
				klog.InfoS("Filled the cache from the hot set", "volumeID", a.volumeID, "blocks", a.warmed.Blocks,
					"bytes", a.warmed.Bytes, "writtenMeanwhile", a.warmed.Dropped, "duration", a.warmed.Duration)
				return nil
			}
		}
		klog.ErrorS(err, "Could not map the copied hot set; the cache starts cold", "volumeID", a.volumeID)
		return a.zeroMetadata(meta)
	})
}

// metadata maps the copied blocks that saw no write.
func (w *warming) metadata(written []uint64) dm.CacheMetadata {
	md := dm.CacheMetadata{BlockSectors: w.blockSectors, CacheBlocks: w.cacheBlocks, Policy: "smq"}
	written = slices.Sorted(slices.Values(written))
	for i, b := range w.blocks {
		if _, hit := slices.BinarySearch(written, b); !hit {
			md.Mappings = append(md.Mappings, dm.Mapping{Cache: uint64(i), Origin: b})
		}
	}
	return md
}

func (w *warming) report(mapped int) WarmReport {
	n := uint64(mapped)
	return WarmReport{Blocks: n, Bytes: n * w.blockSectors * dm.SectorSize, Dropped: uint64(len(w.blocks)) - n, Duration: time.Since(w.start)}
}

// ForgetHotSet deletes a volume's hot set: its volume or binding is gone.
func (e *Engine) ForgetHotSet(volumeID string) error {
	if e.hotSets == nil {
		return nil
	}
	return e.hotSets.Delete(volumeID)
}
