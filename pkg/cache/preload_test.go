package cache

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

// fileMap stands for a volume's filesystem: the extents of each path.
type fileMap struct {
	device dm.DevNum
	files  map[string][]fileblocks.Extent
}

func (f *fileMap) Map(_ context.Context, device dm.DevNum, paths []string, visit fileblocks.Visitor) (fileblocks.Found, error) {
	if device != f.device {
		return fileblocks.Found{}, fileblocks.ErrNotMounted
	}
	var found fileblocks.Found
	for _, p := range paths {
		ex, ok := f.files[p]
		if !ok {
			found.Missing = append(found.Missing, p)
			continue
		}
		found.Files++
		for _, x := range ex {
			found.Bytes += x.Length
			if !visit(x) {
				found.Truncated = true
				return found, nil
			}
		}
	}
	return found, nil
}

// preloadWorld is a world whose staged volume's filesystem holds files.
func preloadWorld(t *testing.T, files map[string][]fileblocks.Extent) *world {
	w := newWorld(t)
	fs := &fileMap{device: dm.DevNum{Major: 253, Minor: 9}, files: files}
	w.engine.files = fs
	w.dev.Add(DevicePath(vol), blockdevfake.Device{Node: "/dev/dm-9", DevNum: fs.device})
	return w
}

const blockBytes = blockSecs * dm.SectorSize

func TestPreloadPromotesTheBlocksOfTheNamedFiles(t *testing.T) {
	w := preloadWorld(t, map[string][]fileblocks.Extent{
		// 1.5 blocks from block 10's middle: blocks 10 and 11; and block 40.
		"model.bin": {{Offset: 10*blockBytes + 4096, Length: blockBytes}, {Offset: 40 * blockBytes, Length: 4096}},
		"index":     {{Offset: 3 * blockBytes, Length: 2 * blockBytes}},
	})
	w.stage(t, warmCache(gib))
	w.used(t, 3) // block 3 is in the cache already
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	r, err := w.engine.Preload(context.Background(), vol, []string{"model.bin", "index", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	var mapped []uint64
	for _, m := range md.Mappings {
		mapped = append(mapped, m.Origin)
	}
	slices.Sort(mapped)
	if want := []uint64{3, 4, 10, 11, 40}; !slices.Equal(mapped, want) {
		t.Fatalf("cache maps origin blocks %v, want %v", mapped, want)
	}
	want := PreloadReport{Files: 2, FileBytes: 3*blockBytes + 4096, Blocks: 4, Held: 1, BlockBytes: blockBytes, Missing: []string{"gone"}, Duration: r.Duration}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("report %+v, want %+v", r, want)
	}
}

// Files written in scattered pieces smaller than a block cost the preload
// one entry per cache block, up to the cache's size (the fake status gives
// 1000 blocks): 200,000 extents of 4 KiB over 2,000 blocks stop the walk
// at 1,000 blocks.
func TestPreloadHoldsBlocksNotExtentsAndStopsAtTheCacheSize(t *testing.T) {
	var pieces []fileblocks.Extent
	for i := range uint64(200_000) {
		pieces = append(pieces, fileblocks.Extent{Offset: (i%2000)*blockBytes + (i/2000)*4096%blockBytes, Length: 4096})
	}
	w := preloadWorld(t, map[string][]fileblocks.Extent{"scattered": pieces})
	w.stage(t, warmCache(gib))
	w.used(t)
	set := newBlockSet(blockBytes, 1000)
	found, err := w.engine.files.Map(context.Background(), dm.DevNum{Major: 253, Minor: 9}, []string{"scattered"}, set.add)
	if err != nil || !found.Truncated || len(set.blocks) != 1000 {
		t.Fatalf("walk: truncated %v, %d blocks (%v); want it stopped at 1000 blocks", found.Truncated, len(set.blocks), err)
	}
	r, err := w.engine.Preload(context.Background(), vol, []string{"scattered"})
	if err != nil || !r.Truncated {
		t.Fatalf("preload %+v (%v): want it truncated at the cache's size", r, err)
	}
}

func TestPreloadNeedsALiveReadCache(t *testing.T) {
	w := preloadWorld(t, nil)
	if _, err := w.engine.Preload(context.Background(), vol, []string{"a"}); !errors.Is(err, ErrNoReadCache) {
		t.Errorf("unstaged volume: err %v, want ErrNoReadCache", err)
	}
	w.stage(t, nil)
	if _, err := w.engine.Preload(context.Background(), vol, []string{"a"}); !errors.Is(err, ErrNoReadCache) {
		t.Errorf("uncached volume: err %v, want ErrNoReadCache", err)
	}
}

func TestPreloadReportsWhatHadNoRoom(t *testing.T) {
	w := preloadWorld(t, map[string][]fileblocks.Extent{"big": {{Offset: 0, Length: 8 * blockBytes}}})
	w.stage(t, warmCache(gib))
	full := make([]uint64, cacheBlocks)
	for i := range full {
		full[i] = 1000 + uint64(i)
	}
	w.used(t, full...)
	if err := w.hotSets.Save(vol, hotset.FromBlocks(full, blockSecs)); err != nil {
		t.Fatal(err)
	}
	r, err := w.engine.Preload(context.Background(), vol, []string{"big"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Blocks != 0 || r.Left != 8 || r.Held != 0 {
		t.Fatalf("report %+v on a full cache, want 8 blocks left, none mapped", r)
	}
}

// One call makes at most PreloadBatches promotions; the next goes on from
// what the cache then holds.
func TestPreloadGoesOnOverCalls(t *testing.T) {
	perBatch := uint64(maxSwappedOutBatchBytes / blockBytes)
	total := PreloadBatches*perBatch + 100
	w := preloadWorld(t, map[string][]fileblocks.Extent{"big": {{Offset: 0, Length: total * blockBytes}}})
	w.stage(t, warmCache(gib))
	w.used(t)
	// Room for every block: the walk stops at the cache's size.
	w.dm.StatusOverride[DeviceName(vol)] = fmt.Sprintf("0 %d cache 8 10/4096 %d 0/%d 0 0 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 cleaner 0 rw -",
		10*gib/dm.SectorSize, blockSecs, cacheBlocks)
	r, err := w.engine.Preload(context.Background(), vol, []string{"big"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.More || r.Blocks != PreloadBatches*perBatch || r.Left != 0 {
		t.Fatalf("first call: %+v; want %d batches of %d blocks and more to come", r, PreloadBatches, perBatch)
	}
	r, err = w.engine.Preload(context.Background(), vol, []string{"big"})
	if err != nil {
		t.Fatal(err)
	}
	if r.More || r.Blocks != 100 || r.Held != PreloadBatches*perBatch || r.Left != 0 {
		t.Fatalf("second call: %+v; want the last 100 blocks, the rest held", r)
	}
}
