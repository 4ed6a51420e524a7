package cache

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

func TestPromoteMapsReadBlocksIntoFreeCacheBlocksAndKeepsTheMappedOnes(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 3, 4) // cache blocks 0 and 1
	w.events = nil
	res, err := w.engine.Promote(context.Background(), vol, []uint64{40, 4, 5, 6, 5})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	want := []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 1, Origin: 4}, {Cache: 2, Origin: 5}, {Cache: 3, Origin: 6}, {Cache: 4, Origin: 40}}
	if !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v", md.Mappings, want)
	}
	if res.Blocks != 3 || res.Kept != 2 || res.Dropped != 0 {
		t.Fatalf("report %+v, want 3 promoted and 2 kept", res)
	}
	// Only the new blocks are read from the origin: 5-6 in one extent, 40 in another.
	if len(w.dev.Copied) != 1 || !strings.Contains(w.dev.Copied[0], "2 extents 196608 bytes") {
		t.Fatalf("copies %v", w.dev.Copied)
	}
	// Writes are counted from before the swap to linear, the copy runs on
	// the linear table, and the cache is back with the mappings written
	// while the device was suspended.
	track, linear := indexOf(w.events, "track-writes"), indexOf(w.events, "dm load", " linear ")
	copied, cache := indexOf(w.events, "copy "), indexOf(w.events, "dm load", " cache ")
	if track < 0 || linear < track || copied < linear || cache < copied {
		t.Fatalf("promotion out of order:\n%s", strings.Join(w.events, "\n"))
	}
	set, _, _ := w.hotSets.Load(vol)
	if wantSet := hotset.FromBlocks([]uint64{3, 4, 5, 6, 40}, blockSecs); !reflect.DeepEqual(set, wantSet) {
		t.Fatalf("hot set %v after promotion, want %v", set, wantSet)
	}
}

func TestPromoteLeavesOutBlocksWrittenWhileTheCacheWasSwappedOut(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 3, 55) // tracking areas 0 and 5 (10 blocks each on this origin)
	w.dev.Record = func(e string) {
		if strings.HasPrefix(e, "copy ") { // written on the linear table: the cache's copy of 55 is stale
			w.dm.Write(DeviceName(vol), 55*blockSecs+1)
		}
	}
	res, err := w.engine.Promote(context.Background(), vol, []uint64{120, 200})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	if want := []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 2, Origin: 120}, {Cache: 3, Origin: 200}}; !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v: a block written while swapped out is still mapped", md.Mappings, want)
	}
	if res.Blocks != 2 || res.Kept != 1 || res.Dropped != 1 {
		t.Fatalf("report %+v, want 2 promoted, 1 kept, 1 dropped", res)
	}
}

func TestPromoteFillsNoMoreThanTheFreeBlocks(t *testing.T) {
	got := intoFreeBlocks([]dm.Mapping{{Cache: 1, Origin: 9}}, []uint64{9, 2, 7, 5, 100}, 3, 50)
	if want := []dm.Mapping{{Cache: 0, Origin: 2}, {Cache: 2, Origin: 5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("copies %v, want %v", got, want)
	}
}

func TestReadsAreCountedOnlyForWarmCaches(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.dm.Read(DeviceName(vol), 25*blockSecs) // tracking area 2: blocks 20-29
	blocks, tracked, err := w.engine.ReadBlocks(context.Background(), vol, w.table(t))
	if err != nil || !tracked {
		t.Fatalf("read blocks: tracked %v, %v", tracked, err)
	}
	if want := []uint64{20, 21, 22, 23, 24, 25, 26, 27, 28, 29}; !reflect.DeepEqual(blocks, want) {
		t.Fatalf("read blocks %v, want %v", blocks, want)
	}
	if blocks, _, _ := w.engine.ReadBlocks(context.Background(), vol, w.table(t)); len(blocks) != 0 {
		t.Fatalf("the reads were reported twice: %v", blocks)
	}
	if _, err := w.engine.SetCache(context.Background(), vol, readCache(2*gib)); err != nil {
		t.Fatal(err)
	}
	if _, tracked, _ := w.engine.ReadBlocks(context.Background(), vol, w.table(t)); tracked {
		t.Fatal("a cache without warm-up counts reads")
	}
}
