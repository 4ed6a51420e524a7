package cache

import (
	"context"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A volume's hot set is the origin blocks its cache held when the cache
// last went (unstage, resize, detach, or, after a crash, the metadata the
// next attach finds). A new cache of the volume is filled with them before
// its table goes live: the warm-up is the entry of a fill (fill.go) whose
// copies are the hot set, as much of it as the cache holds, in origin
// order into cache blocks 0, 1, 2...; the fill maps those that saw no
// write. The set is only a hint; a stale one costs copying time, never a
// wrong byte.

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

// forgetHotSetOfColdCache deletes the hot set of a cache that came back
// cold after a promotion: it names blocks the cache no longer maps, which
// later promotions would skip.
func (a *applier) forgetHotSetOfColdCache() {
	if a.hotSets == nil {
		return
	}
	if err := a.hotSets.Delete(a.volumeID); err != nil {
		klog.ErrorS(err, "Could not delete the hot set of a cache that came back cold", "volumeID", a.volumeID)
	}
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
// table, and leaves the mappings to loadFilled. Any failure leaves the cache
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
	f := newFill(bs, data.Size/(bs*dm.SectorSize), a.want.length, a.trackedAreas)
	limit := f.cacheBlocks
	if l := a.want.cache.WarmLimitBytes; l > 0 {
		limit = min(limit, l/(bs*dm.SectorSize))
	}
	for i, b := range set.Blocks(f.blockSectors, a.want.length, limit) {
		f.copies = append(f.copies, dm.Mapping{Cache: uint64(i), Origin: b})
	}
	if len(f.copies) == 0 {
		return nil // nothing saved, or a limit below one block
	}
	fc := fillControlOf(ctx)
	copyCtx, stop := fc.stoppable(ctx)
	defer stop()
	copyCtx, cancel := context.WithTimeout(copyCtx, warmDeadline(uint64(len(f.copies))*bs*dm.SectorSize))
	defer cancel()
	if err := a.copyHotBlocks(copyCtx, f, meta, data); err != nil {
		if a.warmed.Stopped = fc.stopped() && ctx.Err() == nil; a.warmed.Stopped {
			klog.InfoS("Stopped filling the cache from the hot set; it starts cold", "volumeID", a.volumeID)
		} else {
			klog.ErrorS(err, "Could not fill the cache from the hot set; it starts cold", "volumeID", a.volumeID)
		}
		// The mappings written beside the copy, whole or cut short, name
		// blocks the cache does not hold.
		return a.zeroMetadata(meta)
	}
	a.filling = f
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
// LV, which no table uses yet, so that loadFilled writes it again, with the
// volume suspended, only when a block was written during the copy.
func (a *applier) copyHotBlocks(ctx context.Context, f *fill, meta, data lvm.LV) error {
	return a.underWriteTracking(ctx, f, func() error {
		var g errgroup.Group
		g.Go(func() error { return a.copyBlocks(ctx, f, data) })
		g.Go(func() error {
			a.restoreAhead(ctx, f, meta)
			return nil
		})
		return g.Wait()
	})
}

// ForgetHotSet deletes a volume's hot set: its volume or binding is gone.
func (e *Engine) ForgetHotSet(volumeID string) error {
	if e.hotSets == nil {
		return nil
	}
	return e.hotSets.Delete(volumeID)
}
