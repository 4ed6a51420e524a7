package cache

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

// hotSetOf saves a hot set of the first n origin blocks.
func (w *world) hotSetOf(t *testing.T, n int) {
	t.Helper()
	blocks := make([]uint64, n)
	for i := range blocks {
		blocks[i] = uint64(2 * i) // one extent each: the copy cannot coalesce them
	}
	if err := w.hotSets.Save(vol, hotset.FromBlocks(blocks, blockSecs)); err != nil {
		t.Fatal(err)
	}
}

// A warm-up reports its progress after each part of its copy, up to the
// bytes it copies in all.
func TestWarmUpReportsItsProgress(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	w.hotSetOf(t, 6000) // 375 MiB of 64 KiB blocks: two parts
	var reports [][2]uint64
	ctx := WithFillControl(context.Background(), FillControl{Progress: func(copied, total uint64) {
		reports = append(reports, [2]uint64{copied, total})
	}})
	if _, err := w.engine.SetCache(ctx, vol, warmCache(gib)); err != nil {
		t.Fatal(err)
	}
	total := uint64(6000 * blockSecs * dm.SectorSize)
	part := uint64(progressPartBytes/(blockSecs*dm.SectorSize)) * blockSecs * dm.SectorSize
	if want := [][2]uint64{{part, total}, {total, total}}; !reflect.DeepEqual(reports, want) {
		t.Fatalf("progress reports %v, want %v", reports, want)
	}
}

// Closing Stop ends a warm-up's copy: the cache starts cold, the change
// completes, and the report says the fill was stopped.
func TestStoppedWarmUpStartsCold(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	w.hotSetOf(t, 6000)
	stop := make(chan struct{})
	ctx := WithFillControl(context.Background(), FillControl{Stop: stop, Progress: func(copied, total uint64) {
		if copied < total {
			close(stop) // a spec change arrives during the copy
		}
	}})
	w.events = nil
	res, err := w.engine.SetCache(ctx, vol, warmCache(gib))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Warmed.Stopped || res.Warmed.Blocks != 0 {
		t.Fatalf("warm report %+v, want a stopped fill and no block mapped", res.Warmed)
	}
	// The mappings written beside the copy are zeroed before the load.
	zeroed := slices.IndexFunc(w.events, func(e string) bool { return strings.HasPrefix(e, "zero "+metaPath) })
	load := slices.IndexFunc(w.events, func(e string) bool { return strings.HasPrefix(e, "dm load ") && strings.Contains(e, " cache ") })
	if c, ok := w.table(t).Target.(dm.CacheTarget); !ok || c.Mode != dm.Writethrough || len(w.dev.Copied) > 2 || zeroed < 0 || load < zeroed {
		t.Fatalf("after a stopped warm-up: table %s, %d copies, metadata zeroed at event %d and the cache loaded at %d; want one copy, then zeroed metadata under a writethrough cache",
			w.table(t), len(w.dev.Copied), zeroed, load)
	}
}

func TestInParts(t *testing.T) {
	ex := []blockdev.Extent{{Length: 3}, {Length: 3}, {Length: 1}, {Length: 5}, {Length: 1}}
	got := inParts(ex, 4)
	want := [][]blockdev.Extent{ex[0:2], ex[2:4], ex[4:5]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("inParts: %v, want %v", got, want)
	}
	if inParts(nil, 4) != nil {
		t.Fatal("inParts of nothing is not empty")
	}
}
