package cache

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

func TestPromoteMapsReadBlocksIntoFreeCacheBlocksAndKeepsTheMappedOnes(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 3, 4) // cache blocks 0 and 1
	// As the fill or promotion that mapped them would have saved:
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3, 4}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	w.events = nil
	res, left, err := w.engine.Promote(context.Background(), vol, []uint64{40, 4, 5, 6, 5})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	want := []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 1, Origin: 4}, {Cache: 2, Origin: 5}, {Cache: 3, Origin: 6}, {Cache: 4, Origin: 40}}
	if !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v", md.Mappings, want)
	}
	if res.Blocks != 3 || res.Kept != 2 || res.Dropped != 0 || len(left) != 0 {
		t.Fatalf("report %+v, left %v; want 3 promoted, 2 kept, none left", res, left)
	}
	// Only the blocks not mapped are copied, from the origin, not through
	// the volume's device: 5-6 into cache blocks 2-3, 40 into 4.
	origin := w.table(t).Target.(dm.CacheTarget).Origin
	if len(w.dev.Copied) != 1 || !strings.HasPrefix(w.dev.Copied[0], "copy "+origin.String()+"->") || !strings.Contains(w.dev.Copied[0], "2 extents 196608 bytes") {
		t.Fatalf("transfers %v", w.dev.Copied)
	}
	// This engine did not load the cache with what it maps (a cache on smq
	// maps blocks of its own): writes are counted from before the swap, the
	// copy runs on the linear table, and the cache is back with the
	// mappings written while the device was suspended.
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

func TestPromoteSwappedOutLeavesOutBlocksWrittenMeanwhile(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 3, 55) // tracking areas 0 and 5 (10 blocks each on this origin)
	w.dev.Record = func(e string) {
		if strings.HasPrefix(e, "copy ") { // on the linear table: the copy of 120 and the cache's of 55 may be stale
			w.dm.Write(DeviceName(vol), 120*blockSecs)
			w.dm.Write(DeviceName(vol), 55*blockSecs+1)
		}
	}
	res, _, err := w.engine.Promote(context.Background(), vol, []uint64{120, 200})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	if want := []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 3, Origin: 200}}; !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v: a block written while copied or swapped out is still mapped", md.Mappings, want)
	}
	if res.Blocks != 1 || res.Kept != 1 || res.Dropped != 2 {
		t.Fatalf("report %+v, want 1 promoted, 1 kept, 2 dropped", res)
	}
}

func TestPromoteFillsNoMoreThanTheFreeBlocks(t *testing.T) {
	got := intoFreeBlocks([]dm.Mapping{{Cache: 1, Origin: 9}}, []uint64{9, 2, 7, 5, 100}, 3, 50)
	if want := []dm.Mapping{{Cache: 0, Origin: 2}, {Cache: 2, Origin: 5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("copies %v, want %v", got, want)
	}
}

func TestReadBlocksAreTheMissesOfACacheThePromoterFills(t *testing.T) {
	w := newWorld(t)
	w.engine = w.restartedEngine() // with a promoter
	w.stage(t, warmCache(gib))
	name := DeviceName(vol)
	tracked, ok := w.reads.Tracking(name)
	if !ok || tracked.BlockSectors != blockSecs || tracked.Origin != w.table(t).Target.(dm.CacheTarget).Origin {
		t.Fatalf("misses tracked %v (%+v), want the live cache's origin and block size", ok, tracked)
	}
	w.reads.Miss(name, 25*blockSecs+3)
	w.reads.Miss(name, 7*blockSecs)
	blocks, isTracked, err := w.engine.ReadBlocks(context.Background(), vol, w.table(t))
	slices.Sort(blocks)
	if err != nil || !isTracked || !reflect.DeepEqual(blocks, []uint64{7, 25}) {
		t.Fatalf("read blocks %v (tracked %v, %v), want exactly the blocks missed, [7 25]", blocks, isTracked, err)
	}
	if blocks, _, _ := w.engine.ReadBlocks(context.Background(), vol, w.table(t)); len(blocks) != 0 {
		t.Fatalf("the misses were reported twice: %v", blocks)
	}
	if _, err := w.engine.SetCache(context.Background(), vol, readCache(2*gib)); err != nil {
		t.Fatal(err)
	}
	if _, isTracked, _ := w.engine.ReadBlocks(context.Background(), vol, w.table(t)); isTracked {
		t.Fatal("a cache without warm-up, on smq, reports misses")
	}
	if _, ok := w.reads.Tracking(name); ok {
		t.Fatal("a cache without warm-up still has its misses tracked")
	}
}

// One small read in each 1/16,384 of a 1 TiB volume is 16,384 blocks to
// promote, not every block of the 64 MiB around each read (4.2 million
// blocks with dm-stats areas).
func TestScatteredReadsOfAHugeVolumeGiveOnlyTheBlocksRead(t *testing.T) {
	w := newWorld(t)
	w.engine = w.restartedEngine()
	const tib = uint64(1 << 40)
	table := dm.Table{Length: tib / dm.SectorSize, Target: dm.CacheTarget{BlockSectors: blockSecs, Policy: PolicyFilling, Origin: dm.DevNum{Major: 8}}}
	w.reads.Track(context.Background(), DeviceName(vol), readtrack.Volume{Origin: dm.DevNum{Major: 8}, BlockSectors: blockSecs})
	const reads = 16384
	for i := range uint64(reads) {
		w.reads.Miss(DeviceName(vol), i*(table.Length/reads)+8)
	}
	blocks, _, err := w.engine.ReadBlocks(context.Background(), vol, table)
	if err != nil || len(blocks) != reads {
		t.Fatalf("%d blocks (%v) for %d scattered reads, want one each", len(blocks), err, reads)
	}
}

// After a restart of the plugin nothing records a filling cache's misses
// until the promoter's first look starts it; the origin's last, partial
// block, which dm-cache never caches, is never returned.
func TestReadBlocksStartsTrackingAfterARestartAndSkipsThePartialLastBlock(t *testing.T) {
	w := newWorld(t)
	w.engine = w.restartedEngine()
	w.stage(t, warmCache(gib))
	name := DeviceName(vol)
	table := w.table(t)
	w.reads.Untrack(context.Background(), name) // the restart
	restarted := w.restartedEngine()
	if blocks, tracked, err := restarted.ReadBlocks(context.Background(), vol, table); err != nil || !tracked || len(blocks) != 0 {
		t.Fatalf("first look after a restart: %v, tracked %v, %v; want tracking started, no blocks", blocks, tracked, err)
	}
	table.Length -= blockSecs / 2 // as if the origin ended halfway through its last block
	last := table.Length / blockSecs
	w.reads.Miss(name, last*blockSecs)
	w.reads.Miss(name, (last-1)*blockSecs)
	if blocks, _, _ := restarted.ReadBlocks(context.Background(), vol, table); !reflect.DeepEqual(blocks, []uint64{last - 1}) {
		t.Fatalf("blocks %v, want only the last whole block %d", blocks, last-1)
	}
}

func TestPromoteLeavesTheCacheAloneWhenItHoldsEveryBlockRead(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 3, 4)
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3, 4}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	w.events = nil
	res, _, err := w.engine.Promote(context.Background(), vol, []uint64{4, 3})
	if err != nil {
		t.Fatal(err)
	}
	if res != (WarmReport{}) || len(w.events) != 0 {
		t.Fatalf("promoting blocks the cache holds: report %+v, events %v; want nothing done", res, w.events)
	}
}

func TestToFetchIsBoundedByFreeBlocksAndTheBatch(t *testing.T) {
	w := newFill(blockSecs, 4, 100*blockSecs, dm.MaxTrackedAreas)
	mapped := []dm.Mapping{{Cache: 0, Origin: 7}}
	picked, left := toFetch(w, mapped, []uint64{9, 2, 7, 5, 100, 2}, minBatchBytes)
	if want := []uint64{2, 5, 9}; !reflect.DeepEqual(picked, want) || len(left) != 0 {
		t.Fatalf("with 3 free blocks, 7 mapped: picked %v, left %v; want %v and none left (no room)", picked, left, want)
	}
	perBatch := uint64(maxSwappedOutBatchBytes / (blockSecs * dm.SectorSize))
	many := make([]uint64, 0, 3*perBatch)
	for b := range 3 * perBatch {
		many = append(many, b)
	}
	w = newFill(blockSecs, perBatch+10, 1<<40, dm.MaxTrackedAreas)
	picked, left = toFetch(w, nil, many, maxSwappedOutBatchBytes)
	if got := uint64(len(picked)) * blockSecs * dm.SectorSize; got != maxSwappedOutBatchBytes {
		t.Fatalf("one promotion copies %d bytes, want at most %d", got, maxSwappedOutBatchBytes)
	}
	// The rest waits for the next promotion, as far as the cache has room.
	if want := many[perBatch : perBatch+10]; !reflect.DeepEqual(left, want) {
		t.Fatalf("left %d blocks (%v...), want the 10 the cache still has room for", len(left), left[:min(len(left), 3)])
	}
}

func TestNotHeldLeavesOutTheHotSet(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3, 4, 9}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	if got, want := w.engine.notHeld(vol, w.table(t), []uint64{9, 5, 3, 5, 12}), []uint64{5, 12}; !reflect.DeepEqual(got, want) {
		t.Fatalf("not held %v, want %v", got, want)
	}
}

// With a promoter, a cache that warms up runs the cleaner, which serves its
// mappings and promotes nothing, and HandOver of a cache whose mappings the
// engine does not know (here the metadata maps blocks no load of the
// engine's wrote) loads smq over the same metadata, which it neither zeroes
// nor rewrites; a cache without warm-up, or without a promoter, runs smq
// from the start.
func TestPromotedCachesFillOnTheCleanerUntilHandedOverToSmq(t *testing.T) {
	for _, tc := range []struct {
		name     string
		promoter bool
		spec     *Spec
		want     string
	}{
		{"warm-up with a promoter", true, warmCache(gib), PolicyFilling},
		{"no warm-up", true, readCache(gib), PolicyReplacing},
		{"no promoter", false, warmCache(gib), PolicyReplacing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			opts := []Option{WithBlockSectors(blockSecs)}
			if tc.promoter {
				opts = append(opts, WithPromoter())
			}
			w.engine = NewEngine(w.layers(), testPools, nil, opts...)
			w.dm.CacheUsed = func(c dm.CacheTarget) uint64 {
				md, _ := w.meta.Get(w.metaPathOf(c.Metadata))
				return uint64(len(md.Mappings))
			}
			w.stage(t, tc.spec)
			filling := w.table(t).Target.(dm.CacheTarget)
			if filling.Policy != tc.want {
				t.Fatalf("new cache table runs %q, want %q", filling.Policy, tc.want)
			}
			w.used(t, 3, 4)
			w.events = nil
			if err := w.engine.HandOver(context.Background(), vol); err != nil {
				t.Fatal(err)
			}
			replacing := filling
			replacing.Policy = PolicyReplacing
			if got := w.table(t).Target.(dm.CacheTarget); got.Params() != replacing.Params() {
				t.Fatalf("table after HandOver %q, want %q", got.Params(), replacing.Params())
			}
			if md, _ := w.meta.Get(metaPath); len(md.Mappings) != 2 || indexOf(w.events, "zero ") >= 0 {
				t.Fatalf("mappings after HandOver %v, want the two kept and the metadata not zeroed; events:\n%s", md.Mappings, strings.Join(w.events, "\n"))
			}
			if reloaded := indexOf(w.events, "load ssdcache-pvc-1") >= 0; reloaded != (tc.want == PolicyFilling) {
				t.Fatalf("HandOver of a cache on %q reloaded: %v; events:\n%s", tc.want, reloaded, strings.Join(w.events, "\n"))
			}
		})
	}
}

// A cache whose mappings the engine knows is handed over on a second
// metadata LV holding them, as a promotion's swap maps its batch: a table
// opening metadata no other table holds clears dm-cache's clean-shutdown
// flag, which a same-table reload would leave set while it serves (and a
// clean reboot would then refill the cache from the HDD).
func TestHandOverOfAKnownLayoutLoadsSmqOverASecondMetadataLV(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t) // the kernel formatted the zeroed metadata
	if got := promoteOrder(t, w, 5, 6); got != "serving" {
		t.Fatalf("the promotion copied %s", got)
	}
	before := w.table(t).Target.(dm.CacheTarget)
	mapped := w.liveMeta(t).Mappings
	w.events = nil
	if err := w.engine.HandOver(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	after := w.table(t).Target.(dm.CacheTarget)
	if after.Policy != PolicyReplacing || after.Metadata == before.Metadata || after.Data != before.Data {
		t.Fatalf("table after HandOver %q (before %q): want smq over another metadata LV, the same data LV", after.Params(), before.Params())
	}
	if got := w.liveMeta(t).Mappings; !sameMappings(got, mapped) || len(got) != 2 {
		t.Fatalf("mappings after HandOver %v, want %v", got, mapped)
	}
	if indexOf(w.events, "dm load", " linear ") >= 0 || indexOf(w.events, "zero ") >= 0 {
		t.Fatalf("HandOver took the cache out or zeroed metadata:\n%s", strings.Join(w.events, "\n"))
	}
	if lvs := w.cacheLVs(t); len(lvs) != 2 {
		t.Fatalf("cache LVs after HandOver %v, want the data LV and the new metadata LV", lvs)
	}
}

// A hand-over whose replaced metadata maps blocks the engine did not load
// (its layout was wrong) brings the cache back cold rather than serving
// the new metadata's mappings.
func TestHandOverOverAWrongLayoutComesBackCold(t *testing.T) {
	w := newWorld(t)
	w.engine = w.restartedEngine()
	w.stage(t, warmCache(gib))
	w.used(t, 3, 4) // mapped by no load of the engine's, while the kernel reports none used
	err := w.engine.HandOver(context.Background(), vol)
	if err == nil || !strings.Contains(err.Error(), "layout was not the one loaded") || !strings.Contains(err.Error(), "came back cold") {
		t.Fatalf("err %v, want the wrong layout found and the cache back cold", err)
	}
	if md := w.liveMeta(t); len(md.Mappings) != 0 {
		t.Fatalf("the cache maps %v after a hand-over over a wrong layout, want nothing", md.Mappings)
	}
}

// A promotion that fails after its swap (here the metadata cannot be read)
// loads the cache back cold: the error says so, the blocks beyond the batch
// are handed back, and the hot set, which named blocks the cold cache no
// longer maps, is gone, so that later promotions do not skip them.
func TestPromotionThatComesBackColdForgetsTheHotSet(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3, 4}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	_, _, err := w.engine.Promote(context.Background(), vol, []uint64{5, 6})
	if err == nil || !strings.Contains(err.Error(), "came back cold") {
		t.Fatalf("err %v, want the failure and that the cache came back cold", err)
	}
	if c, ok := w.table(t).Target.(dm.CacheTarget); !ok || c.Mode != dm.Writethrough {
		t.Fatalf("table %q after the failed promotion, want the cache back", w.table(t))
	}
	if _, ok, _ := w.hotSets.Load(vol); ok {
		t.Fatal("the hot set of a cache that came back cold is still saved")
	}
}

// promotingWorld is a world whose engine has a promoter, so caches that
// warm up fill on PolicyFilling, and whose kernel reports as many used
// blocks as the cache metadata maps.
func promotingWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	w.engine = w.restartedEngine()
	w.dm.CacheUsed = func(c dm.CacheTarget) uint64 {
		md, _ := w.meta.Get(w.metaPathOf(c.Metadata))
		return uint64(len(md.Mappings))
	}
	return w
}

// restartedEngine is a new engine over the same world, as after a restart
// of the node plugin.
func (w *world) restartedEngine() *Engine {
	return NewEngine(w.layers(), testPools, nil, WithBlockSectors(blockSecs), WithPromoter())
}

// promoteOrder says how a promotion mapped its blocks: "serving" when it
// copied them and loaded the cache again over new metadata without a
// linear table in between, "serving, swapped out to map" when it copied
// while the cache served and swapped it out to write the metadata (no room
// for a second metadata LV), "swapped out" when it copied after the swap.
func promoteOrder(t *testing.T, w *world, blocks ...uint64) string {
	t.Helper()
	w.events = nil
	res, _, err := w.engine.Promote(context.Background(), vol, blocks)
	if err != nil {
		t.Fatal(err)
	}
	copied, linear, cache := indexOf(w.events, "copy "), indexOf(w.events, "dm load", " linear "), indexOf(w.events, "dm load", " cache ")
	switch {
	case copied < 0 || cache < copied || cache < linear || indexOf(w.events, "track-writes") > copied:
		t.Fatalf("promotion of %v out of order:\n%s", blocks, strings.Join(w.events, "\n"))
	case (linear < 0) != (res.Uncached == 0 && res.Suspended > 0):
		t.Fatalf("promotion of %v reports %v uncached and %v suspended; linear table loaded: %v", blocks, res.Uncached, res.Suspended, linear >= 0)
	case linear < 0:
		return "serving"
	case copied < linear:
		return "serving, swapped out to map"
	}
	return "swapped out"
}

// The engine knows which blocks a cache it loaded on the cleaner maps, so
// a promotion copies into its free blocks while it serves and swaps it out
// only to write the metadata; a promoter that restarted, or a cache loaded
// again on smq, makes the next promotion copy with the cache swapped out.
func TestPromoteCopiesWhileTheCacheServesWhenItKnowsWhatTheCacheMaps(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t) // the kernel formatted the zeroed metadata
	if got := promoteOrder(t, w, 5, 6, 40); got != "serving" {
		t.Fatalf("the first promotion into a new cache copied %s", got)
	}
	if got := promoteOrder(t, w, 7, 5); got != "serving" {
		t.Fatalf("the promotion after one copied %s", got)
	}
	md := w.liveMeta(t)
	if want := []dm.Mapping{{Cache: 0, Origin: 5}, {Cache: 1, Origin: 6}, {Cache: 2, Origin: 40}, {Cache: 3, Origin: 7}}; !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v", md.Mappings, want)
	}
	w.engine = w.restartedEngine()
	if got := promoteOrder(t, w, 8); got != "swapped out" {
		t.Fatalf("the first promotion of a restarted engine copied %s", got)
	}
	if got := promoteOrder(t, w, 9); got != "serving" {
		t.Fatalf("the second promotion of a restarted engine copied %s", got)
	}
	if err := w.engine.HandOver(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	if got := promoteOrder(t, w, 10); got != "swapped out" {
		t.Fatalf("a promotion into a cache on smq copied %s", got)
	}
}

// A cache that maps blocks its engine did not load (here the kernel
// reports none used while the metadata maps one) would have served the
// copy's blocks: the promotion finds the collision in the metadata and the
// cache comes back cold.
func TestPromoteIntoBlocksTheCacheMapsComesBackCold(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.dm.CacheUsed = nil
	w.used(t, 3) // cache block 0
	_, _, err := w.engine.Promote(context.Background(), vol, []uint64{5})
	if err == nil || !strings.Contains(err.Error(), "layout was not the one loaded") || !strings.Contains(err.Error(), "came back cold") {
		t.Fatalf("err %v, want the collision found and the cache back cold", err)
	}
	if md := w.liveMeta(t); len(md.Mappings) != 0 {
		t.Fatalf("mappings %v after the collision, want none", md.Mappings)
	}
}

// A block written while the copy into the serving cache runs is left out
// of the mappings written beside the live ones; the rest of the batch is
// mapped.
func TestPromoteWhileServingLeavesOutBlocksWrittenDuringTheCopy(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t) // the kernel formatted the zeroed metadata
	w.dev.Record = func(e string) {
		if strings.HasPrefix(e, "copy ") {
			w.dm.Write(DeviceName(vol), 120*blockSecs) // tracking area 12
		}
	}
	res, left, err := w.engine.Promote(context.Background(), vol, []uint64{120, 200})
	if err != nil {
		t.Fatal(err)
	}
	if want := []dm.Mapping{{Cache: 1, Origin: 200}}; !res.CopiedWhileServing || !reflect.DeepEqual(w.liveMeta(t).Mappings, want) || res.Dropped != 1 || len(left) != 0 {
		t.Fatalf("copied while serving %v, mappings %v, %d dropped, left %v; want %v, 1 dropped, none left", res.CopiedWhileServing, w.liveMeta(t).Mappings, res.Dropped, left, want)
	}
}

// A block written after that look, while the mappings are written beside
// the live ones, is left out too: the mappings are written again without
// it with the device suspended (as a swap to a linear table does), so a
// batch maps what was not written even under steady writes.
func TestPromoteWhileServingLeavesOutBlocksWrittenBeforeTheSwap(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t) // the kernel formatted the zeroed metadata
	record := w.lvm.Record
	w.lvm.Record = func(e string) {
		if strings.Contains(e, "cache-meta2") { // the second metadata LV is made after the look at the writes
			w.dm.Write(DeviceName(vol), 120*blockSecs)
		}
		record(e)
	}
	w.meta.Calls, w.events = nil, nil
	res, left, err := w.engine.Promote(context.Background(), vol, []uint64{120, 200})
	if err != nil {
		t.Fatal(err)
	}
	if want := []dm.Mapping{{Cache: 1, Origin: 200}}; res.Blocks != 1 || res.Dropped != 1 || len(left) != 0 || !reflect.DeepEqual(w.liveMeta(t).Mappings, want) {
		t.Fatalf("%d mapped, %d dropped, left %v, mappings %v; want %v, 1 dropped, none left", res.Blocks, res.Dropped, left, w.liveMeta(t).Mappings, want)
	}
	if got := restores(w.meta.Calls); len(got) != 2 || got[1] != "restore /dev/ssdcache-nvme/pvc-1.cache-meta2 1 mappings" {
		t.Fatalf("metadata writes %v, want both blocks beside the live ones, then 200 alone", got)
	}
	// dm-cache reads its metadata when its table is loaded: the table loaded
	// ahead over the first write is dropped, and loaded again after the
	// second, all while suspended.
	suspend := indexOf(w.events, "dm suspend")
	if suspend < 0 || !slices.Equal(w.events[suspend+1:suspend+3], []string{"dm clear " + DeviceName(vol), w.events[suspend-1]}) || w.events[suspend+3] != "dm resume "+DeviceName(vol) {
		t.Fatalf("want the loaded table cleared and loaded again while suspended:\n%s", strings.Join(w.events, "\n"))
	}
}

// A copy into the serving cache that fails (the origin does not answer)
// leaves the cache as it was, serving, and hands the whole batch back.
func TestPromoteWhoseCopyFailsWhileServingLeavesTheCacheServing(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	origin := w.table(t).Target.(dm.CacheTarget).Origin
	w.dev.Failing[origin.String()] = true
	w.events = nil
	_, left, err := w.engine.Promote(context.Background(), vol, []uint64{5, 6})
	if err == nil || indexOf(w.events, "dm load") >= 0 || !reflect.DeepEqual(left, []uint64{5, 6}) {
		t.Fatalf("err %v, left %v, events:\n%s\nwant the error, both blocks left and no table loaded", err, left, strings.Join(w.events, "\n"))
	}
	if indexOf(w.events, "untrack") < 0 {
		t.Fatalf("the write tracking of the failed copy was not removed:\n%s", strings.Join(w.events, "\n"))
	}
	delete(w.dev.Failing, origin.String())
	if got := promoteOrder(t, w, 5, 6); got != "serving" {
		t.Fatalf("after a failed copy, the next promotion copied %s", got)
	}
}

// A promotion whose mappings cannot be written (cache_restore fails with the
// device suspended) loads the cache back with zeroed metadata, cold, and
// forgets the hot set as well.
func TestPromotionWhoseMappingsCannotBeWrittenForgetsTheHotSet(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{3, 4}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	w.meta.FailRestore = errors.New("cache_restore: killed")
	if _, _, err := w.engine.Promote(context.Background(), vol, []uint64{5, 6}); err != nil {
		t.Fatal(err)
	}
	if c, ok := w.table(t).Target.(dm.CacheTarget); !ok || c.Mode != dm.Writethrough {
		t.Fatalf("table %q after the promotion, want the cache back", w.table(t))
	}
	if _, ok, _ := w.hotSets.Load(vol); ok {
		t.Fatal("the hot set of a cache that came back cold is still saved")
	}
}

// A promotion that swapped the cache out and found nothing to copy writes
// its metadata again all the same: the dump shows clean mappings, but not
// whether the kernel's commit at suspend (whose failure it ignores) marked
// the superblock clean; loaded over a superblock not so marked, every
// mapping would count as dirty, and writethrough would trust the SSD.
func TestPromotionWithNothingToCopyRewritesTheMetadata(t *testing.T) {
	w := newWorld(t)
	w.withPromoter()
	w.stage(t, warmCache(gib))
	w.used(t, 7)
	w.restart() // the blocks the cache maps are not known: the copy would run swapped out
	w.meta.Calls = nil
	res, _, err := w.engine.Promote(context.Background(), vol, []uint64{7})
	if err != nil {
		t.Fatal(err)
	}
	if got := restores(w.meta.Calls); res.Blocks != 0 || len(got) != 1 || got[0] != "restore "+metaPath+" 1 mappings" {
		t.Fatalf("promoted %d, metadata writes %v; want none promoted and the one mapping written again", res.Blocks, got)
	}
}

// Every batch writes all the cache's mappings again, so filling a cache
// costs the sum of the mappings each batch writes: with batches of a share
// of the cache, a constant times the cache's blocks at any size (about
// (fillBatches+1)/2), where fixed 1 GiB batches made it grow with the
// cache (16 times the blocks at 32 GiB, 32 times at 64 GiB).
func TestFillingACacheWritesMappingsInProportionToItsSize(t *testing.T) {
	const blockBytes = 256 << 10
	for _, cacheBytes := range []uint64{1 << 30, 32 << 30, 64 << 30} {
		cacheBlocks := cacheBytes / blockBytes
		w := newFill(blockBytes/dm.SectorSize, cacheBlocks, 4<<40/dm.SectorSize, dm.MaxTrackedAreas)
		read := make([]uint64, cacheBlocks)
		for i := range read {
			read[i] = uint64(i) * 7 // a working set as large as the cache, spread over the volume
		}
		var mapped []dm.Mapping
		batches, written := 0, uint64(0)
		for todo := read; len(todo) > 0; batches++ {
			picked, left := toFetch(w, mapped, todo, BatchBytes(cacheBytes))
			if len(picked) == 0 {
				break
			}
			mapped = append(mapped, intoFreeBlocks(mapped, picked, cacheBlocks, w.originBlocks)...)
			written += uint64(len(mapped)) // the batch's cache_restore
			todo = left
		}
		if uint64(len(mapped)) != cacheBlocks {
			t.Fatalf("%d GiB cache: %d of %d blocks mapped", cacheBytes>>30, len(mapped), cacheBlocks)
		}
		if batches > fillBatches || written > (fillBatches+1)/2*cacheBlocks+cacheBlocks {
			t.Errorf("%d GiB cache: filled in %d batches writing %d mappings (%.1f x its blocks); want at most %d batches and %d x",
				cacheBytes>>30, batches, written, float64(written)/float64(cacheBlocks), fillBatches, (fillBatches+1)/2+1)
		}
	}
}

func TestBatchTimeoutCoversTheBatchAtTwoMBPerSecond(t *testing.T) {
	for _, cacheBytes := range []uint64{1 << 30, 32 << 30, 400e9} {
		batch, limit := BatchBytes(cacheBytes), BatchTimeout(cacheBytes)
		if rate := float64(batch) / limit.Seconds(); rate > 2e6 {
			t.Errorf("%d-byte cache: a %d-byte batch within %v needs %.1f MB/s from the HDD; want at most 2", cacheBytes, batch, limit, rate/1e6)
		}
	}
}
