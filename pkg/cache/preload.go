package cache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
)

// ErrNoReadCache: the volume has no live read cache to preload into (not
// staged here, uncached, or paused).
var ErrNoReadCache = errors.New("the volume has no live read cache")

// A preload copies the blocks of files a user names into the cache before
// they are read, as Fluid's DataLoad does for file caches: the files'
// extents in the volume's filesystem are its origin blocks (the cache's
// device maps the origin one to one), and each batch of them is promoted
// as the promoter promotes blocks read (Promote, a fill: fill.go; copied
// under write tracking, mapped clean, never a stale block). The blocks go into free
// cache blocks only; a full cache keeps what smq chose.

// PreloadReport says what a preload of named paths did.
type PreloadReport struct {
	// Files were found under the paths; FileBytes is their data.
	Files     int
	FileBytes uint64
	// Blocks were copied into the cache and mapped; Held already were.
	Blocks, Held uint64
	// Left had no free cache block.
	Left uint64
	// BlockBytes is the cache's block size.
	BlockBytes uint64
	// Missing are the paths that do not exist in the volume.
	Missing []string
	// Truncated: the files hold more than the cache, whose size the
	// preload stopped at.
	Truncated bool
	// More: the call stopped after PreloadBatches batches with blocks left
	// to copy; the next call goes on (the blocks copied are held by then).
	More     bool
	Duration time.Duration
}

// PreloadBatches is how many promotions one Preload call makes at most
// (up to 2 GiB copied while the cache serves, 256 MiB with it swapped
// out): the caller holds the volume, and other work on it (a
// NodeUnstageVolume, a drop of a failing cache) waits for at most that.
const PreloadBatches = 2

// Preload copies the data of paths (files or directories, relative to the
// root of the filesystem mounted from the volume's device) into the
// volume's read cache. A failure part way keeps the batches already
// mapped; a promotion that fails after its swap leaves the cache cold
// (Promote), never stale.
func (e *Engine) Preload(ctx context.Context, volumeID string, paths []string) (PreloadReport, error) {
	start := time.Now()
	if e.files == nil || e.metadata == nil {
		return PreloadReport{}, fmt.Errorf("preload on volume %s: %w: this node keeps no hot sets or cannot map files", volumeID, ErrInvalid)
	}
	live, st, err := e.liveReadCache(ctx, volumeID)
	if err != nil {
		return PreloadReport{}, err
	}
	dev, err := e.dev.DevNum(DevicePath(volumeID))
	if err != nil {
		return PreloadReport{}, err
	}
	r := PreloadReport{BlockBytes: live.BlockSectors * dm.SectorSize}
	set := newBlockSet(r.BlockBytes, st.CacheTotal)
	found, err := e.files.Map(ctx, dev, paths, set.add)
	if err != nil {
		return r, fmt.Errorf("preload on volume %s: %w", volumeID, err)
	}
	r.Files, r.FileBytes, r.Missing, r.Truncated = found.Files, found.Bytes, found.Missing, found.Truncated
	err = e.promoteAll(ctx, volumeID, set.sorted(), BatchTimeout(st.CacheTotal*r.BlockBytes), &r)
	r.Duration = time.Since(start)
	klog.InfoS("Preloaded named paths", "volumeID", volumeID, "files", r.Files, "fileBytes", r.FileBytes, "blocks", r.Blocks,
		"held", r.Held, "left", r.Left, "missing", len(r.Missing), "duration", r.Duration, "err", err)
	return r, err
}

// liveReadCache is the volume's live writethrough cache and its status.
func (e *Engine) liveReadCache(ctx context.Context, volumeID string) (dm.CacheTarget, dm.CacheStatus, error) {
	table, staged, err := e.LiveTable(ctx, volumeID)
	if err != nil {
		return dm.CacheTarget{}, dm.CacheStatus{}, err
	}
	live, cached := table.Target.(dm.CacheTarget)
	if !staged || !cached || live.Mode != dm.Writethrough {
		return dm.CacheTarget{}, dm.CacheStatus{}, fmt.Errorf("preload on volume %s: %w (table %q)", volumeID, ErrNoReadCache, table)
	}
	line, err := e.dm.Status(ctx, DeviceName(volumeID))
	if err != nil {
		return dm.CacheTarget{}, dm.CacheStatus{}, err
	}
	st, err := dm.ParseCacheStatus(line)
	return live, st, err
}

// promoteAll promotes blocks batch by batch until every one is in the
// cache, no free block is left or PreloadBatches were made, and counts
// them in r. A cancelled ctx stops it between batches, never inside one:
// a promotion stopped between its two table swaps would leave the volume
// uncached.
func (e *Engine) promoteAll(ctx context.Context, volumeID string, blocks []uint64, batchTimeout time.Duration, r *PreloadReport) error {
	todo := blocks
	for batch := 0; len(todo) > 0; batch++ {
		if batch == PreloadBatches {
			r.More = true
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
		w, left, err := e.Promote(bctx, volumeID, todo)
		cancel()
		r.Blocks += w.Blocks // a failed batch may have mapped some
		if err != nil {
			return err
		}
		todo = left // what one batch could not hold: fewer every time, none once nothing was picked
	}
	table, _, err := e.LiveTable(ctx, volumeID)
	if err != nil {
		return err
	}
	// The last promotion saved what the cache maps as the hot set.
	notHeld := uint64(len(e.notHeld(volumeID, table, blocks)))
	r.Held = uint64(len(blocks)) - min(uint64(len(blocks)), r.Blocks+notHeld)
	if !r.More {
		r.Left = notHeld // not for want of batches: of room
	}
	return nil
}

// notHeld returns, sorted and once each, the blocks (origin blocks of the
// live cache's block size) that the volume's hot set, saved by the last
// fill or promotion, does not name.
func (e *Engine) notHeld(volumeID string, table dm.Table, blocks []uint64) []uint64 {
	blocks = slices.Compact(slices.Sorted(slices.Values(blocks)))
	live, cached := table.Target.(dm.CacheTarget)
	if !cached || len(blocks) == 0 {
		return blocks
	}
	held := e.heldBlocks(volumeID, live.BlockSectors, table.Length, math.MaxUint64)
	return slices.DeleteFunc(blocks, func(b uint64) bool { return held[b] })
}

// blockSet collects the cache blocks that extents touch, at most max of
// them: a preload of files written in millions of scattered small pieces
// holds one entry per cache block (at most cachesize.MaxCacheBlocks), not one per
// extent.
type blockSet struct {
	blockBytes, max uint64
	blocks          map[uint64]struct{}
}

func newBlockSet(blockBytes, max uint64) *blockSet {
	return &blockSet{blockBytes: blockBytes, max: max, blocks: map[uint64]struct{}{}}
}

// add adds the blocks of x; false once a new block would exceed max.
func (s *blockSet) add(x fileblocks.Extent) bool {
	if x.Length == 0 {
		return true
	}
	for b := x.Offset / s.blockBytes; b <= (x.Offset+x.Length-1)/s.blockBytes; b++ {
		if _, ok := s.blocks[b]; ok {
			continue
		}
		if uint64(len(s.blocks)) >= s.max {
			return false
		}
		s.blocks[b] = struct{}{}
	}
	return true
}

// sorted are the blocks in origin order.
func (s *blockSet) sorted() []uint64 {
	return slices.Sorted(maps.Keys(s.blocks))
}
