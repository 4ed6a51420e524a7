package cache

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

const (
	metaPath = "/dev/ssdcache-nvme/pvc-1.cache-meta"
	// blockSecs: the engine of the tests makes 64 KiB blocks (WithBlockSectors),
	// in which their block numbers are counted.
	blockSecs   = 128
	cacheBlocks = gib / (blockSecs * dm.SectorSize)
)

func warmCache(size uint64) *Spec { return &Spec{SizeBytes: size, Mode: ModeReadCache, Warm: true} }

// used stands for a cache that promoted origin blocks: its metadata maps them.
func (w *world) used(t *testing.T, origin ...uint64) {
	t.Helper()
	md := dm.CacheMetadata{BlockSectors: blockSecs, CacheBlocks: cacheBlocks, Policy: "smq"}
	for i, b := range origin {
		md.Mappings = append(md.Mappings, dm.Mapping{Cache: uint64(i), Origin: b})
	}
	w.meta.Put(metaPath, md)
}

// unstageWithoutKeeping unstages the volume and removes the cache LVs a
// clean unstage keeps, as if they had not been kept (a static disk, or a
// reboot while staged): the next cache is filled from the hot set.
func (w *world) unstageWithoutKeeping(t *testing.T) {
	t.Helper()
	if err := w.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	if err := w.engine.Detach(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
}

func TestUnstageKeepsTheHotSetAndTheNextAttachMapsIt(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 7, 3, 4, 5)
	w.unstageWithoutKeeping(t)
	set, ok, _ := w.hotSets.Load(vol)
	if want := hotset.FromBlocks([]uint64{3, 4, 5, 7}, blockSecs); !ok || !reflect.DeepEqual(set, want) {
		t.Fatalf("hot set after unstage %v (%v), want %v", set, ok, want)
	}

	w.events = nil
	if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: w.origin(t)}); err != nil {
		t.Fatal(err)
	}
	restoredAtSuspend, record := -1, w.dm.Record
	w.dm.Record = func(e string) {
		if strings.HasPrefix(e, "dm suspend") {
			restoredAtSuspend = len(restores(w.meta.Calls))
		}
		record(e)
	}
	res, err := w.engine.SetCache(context.Background(), vol, warmCache(gib))
	if err != nil {
		t.Fatal(err)
	}
	if res.Warmed.Blocks != 4 || res.Warmed.Bytes != 4*blockSecs*dm.SectorSize || res.Warmed.Dropped != 0 {
		t.Fatalf("warm report %+v, want 4 blocks of 64 KiB", res.Warmed)
	}
	md, _ := w.meta.Get(metaPath)
	want := []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 1, Origin: 4}, {Cache: 2, Origin: 5}, {Cache: 3, Origin: 7}}
	if !reflect.DeepEqual(md.Mappings, want) || md.CacheBlocks != cacheBlocks || md.BlockSectors != blockSecs {
		t.Fatalf("restored metadata %+v, want mappings %v", md, want)
	}
	// Origin order and one read per run: blocks 3-5 are one extent, 7 another.
	if len(w.dev.Copied) != 1 || !strings.Contains(w.dev.Copied[0], "2 extents 262144 bytes") {
		t.Fatalf("copies %v", w.dev.Copied)
	}
	// The mappings were written once, during the copy, before the device
	// was suspended: the check then found no block written meanwhile.
	if n := len(restores(w.meta.Calls)); n != 1 || restoredAtSuspend != 1 {
		t.Fatalf("metadata written %d times, %d of them before the last suspend; want once, before it", n, restoredAtSuspend)
	}
	// The copy ran while writes were counted, the check came with the
	// device suspended, before the cache table was loaded.
	origin := w.table(t).Target.(dm.CacheTarget).Origin // read directly, not through the volume's device
	track, copied := indexOf(w.events, "track-writes"), indexOf(w.events, "copy "+origin.String()+"->")
	suspend, load := indexOf(w.events[copied:], "suspend ssdcache-pvc-1")+copied, indexOf(w.events, "load ssdcache-pvc-1", " cache ")
	if track < 0 || copied < track || suspend < copied || load < suspend || indexOf(w.events, "untrack") < load {
		t.Fatalf("warm-up out of order:\n%s", strings.Join(w.events, "\n"))
	}
}

func restores(calls []string) []string {
	return slices.DeleteFunc(slices.Clone(calls), func(c string) bool { return !strings.HasPrefix(c, "restore ") })
}

func TestBlocksWrittenDuringTheCopyAreNotMapped(t *testing.T) {
	w := newWorld(t)
	// The 10 GiB origin has 163840 blocks: writes are counted per 10 blocks
	// (dm.MaxTrackedAreas), and a write to any drops all ten.
	if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{1, 25, 35, 99}, blockSecs)); err != nil {
		t.Fatal(err)
	}
	w.dev.Record = func(e string) {
		if strings.HasPrefix(e, "copy ") { // the application writes blocks 29 and 90 meanwhile
			w.dm.Write(DeviceName(vol), 29*blockSecs+5)
			w.dm.Write(DeviceName(vol), 90*blockSecs)
		}
	}
	w.stage(t, nil)
	res, err := w.engine.SetCache(context.Background(), vol, warmCache(gib))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	if want := []dm.Mapping{{Cache: 0, Origin: 1}, {Cache: 2, Origin: 35}}; !reflect.DeepEqual(md.Mappings, want) {
		t.Fatalf("mappings %v, want %v: a block written during the copy is mapped", md.Mappings, want)
	}
	if res.Warmed.Blocks != 2 || res.Warmed.Dropped != 2 {
		t.Fatalf("warm report %+v, want 2 mapped and 2 dropped", res.Warmed)
	}
	// The mappings written during the copy named all four; the load wrote them again.
	if want := []string{"restore " + metaPath + " 4 mappings", "restore " + metaPath + " 2 mappings"}; !reflect.DeepEqual(w.meta.Calls, want) {
		t.Fatalf("metadata calls %v, want %v", w.meta.Calls, want)
	}
}

// A warm-up that fails starts the cache cold, its metadata zeroed again
// (rule 2): the mappings are written while the hot set is copied, so a
// failed copy leaves them naming blocks the cache does not hold.
func TestFailedWarmUpStartsTheCacheCold(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fail     func(t *testing.T, w *world)
		restores int // cache_restore runs: during the copy, and at the load unless the copy failed
	}{
		{name: "cache_restore fails", fail: func(_ *testing.T, w *world) { w.meta.FailRestore = errors.New("cache_restore: killed") }, restores: 2},
		{name: "the copy fails", fail: func(t *testing.T, w *world) {
			w.dev.Failing[w.table(t).Target.(dm.LinearTarget).Device.String()] = true
		}, restores: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{1, 2, 3}, blockSecs)); err != nil {
				t.Fatal(err)
			}
			w.stage(t, nil)
			tc.fail(t, w)
			w.dev.Zeroed = nil
			res, err := w.engine.SetCache(context.Background(), vol, warmCache(gib))
			if err != nil {
				t.Fatal(err)
			}
			if _, isCache := w.table(t).Target.(dm.CacheTarget); !isCache || res.Warmed.Blocks != 0 {
				t.Fatalf("table %s, warm report %+v: want a cold cache", w.table(t), res.Warmed)
			}
			if n := len(restores(w.meta.Calls)); n != tc.restores {
				t.Fatalf("cache_restore ran %d times, want %d", n, tc.restores)
			}
			// Zeroed before the warm-up and again after the failure.
			if n := len(w.dev.Zeroed); n != 2 {
				t.Fatalf("metadata zeroed %d times (%v), want 2", n, w.dev.Zeroed)
			}
		})
	}
}

func TestWarmNoneAndNoHotSetStartCold(t *testing.T) {
	for name, spec := range map[string]*Spec{"policy None": readCache(gib), "no hot set": warmCache(gib)} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			if name == "policy None" {
				_ = w.hotSets.Save(vol, hotset.FromBlocks([]uint64{1}, blockSecs))
			}
			w.stage(t, spec)
			if len(w.dev.Copied) != 0 || slices.ContainsFunc(w.meta.Calls, func(c string) bool { return strings.HasPrefix(c, "restore") }) {
				t.Fatalf("warmed anyway: copies %v, metadata calls %v", w.dev.Copied, w.meta.Calls)
			}
		})
	}
}

func TestResizeCarriesTheHotSetIntoTheNewCache(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 10, 11)
	res, err := w.engine.SetCache(context.Background(), vol, warmCache(2*gib))
	if err != nil {
		t.Fatal(err)
	}
	md, _ := w.meta.Get(metaPath)
	if res.Warmed.Blocks != 2 || md.CacheBlocks != 2*cacheBlocks || !reflect.DeepEqual(md.Mappings, []dm.Mapping{{Cache: 0, Origin: 10}, {Cache: 1, Origin: 11}}) {
		t.Fatalf("warm report %+v, metadata %+v; want origin blocks 10 and 11 in the larger cache", res.Warmed, md)
	}
}

// Pausing swaps the cache for a linear table, keeps its LVs and saves its
// hot set; resuming maps the kept blocks again (kept_test.go has the rest).
func TestPauseKeepsTheCacheAndResumeIsWarm(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 5)
	paused := &Spec{SizeBytes: gib, Mode: ModePaused, Warm: true}
	if _, err := w.engine.SetCache(context.Background(), vol, paused); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.table(t).Target.(dm.LinearTarget); !ok || len(w.cacheLVs(t)) != 2 {
		t.Fatalf("paused: table %s, LVs %v", w.table(t), w.cacheLVs(t))
	}
	if st, _ := w.engine.Inspect(context.Background(), vol); !st.HasCache || st.Cached || st.Spec.Mode != ModePaused {
		t.Fatalf("Inspect of a paused cache: %+v", st)
	}
	if res, err := w.engine.SetCache(context.Background(), vol, paused); err != nil || res.Changed {
		t.Fatalf("pausing again changed something: %+v, %v", res, err)
	}
	res, err := w.engine.SetCache(context.Background(), vol, warmCache(gib))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := w.table(t).Target.(dm.CacheTarget); !ok || c.Mode != dm.Writethrough || res.Warmed.Kept != 2 {
		t.Fatalf("resumed: table %s, warm report %+v", w.table(t), res.Warmed)
	}
}

// A passthrough table left by an older version counts as paused, and
// resuming it is a warm attach like any other.
func TestLegacyPassthroughResumes(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	live := w.table(t)
	c := live.Target.(dm.CacheTarget)
	c.Mode = dm.Passthrough
	live.Target = c
	if err := w.engine.reload(context.Background(), "test", vol, live); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.engine.Inspect(context.Background(), vol); st.Spec.Mode != ModePaused {
		t.Fatalf("legacy passthrough read as %s", st.Spec.Mode)
	}
	w.used(t, 9)
	res, err := w.engine.SetCache(context.Background(), vol, warmCache(gib))
	if c, ok := w.table(t).Target.(dm.CacheTarget); err != nil || !ok || c.Mode != dm.Writethrough || res.Warmed.Blocks != 1 {
		t.Fatalf("resumed legacy pause: table %s, %+v, %v", w.table(t), res, err)
	}
}

func TestHotSetIsReadOnlyFromIdleMetadata(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 1)
	w.meta.Calls = nil
	// Repeating the same spec keeps the live table's metadata in use: nothing is read.
	if _, err := w.engine.SetCache(context.Background(), vol, warmCache(gib)); err != nil {
		t.Fatal(err)
	}
	if len(w.meta.Calls) != 0 {
		t.Fatalf("metadata tools ran on live metadata: %v", w.meta.Calls)
	}
	// A detach swaps the table out first, then reads the metadata.
	w.events = nil
	if _, err := w.engine.SetCache(context.Background(), vol, nil); err != nil {
		t.Fatal(err)
	}
	linear := indexOf(w.events, "load ssdcache-pvc-1", " linear ")
	removed := indexOf(w.events, "removelv")
	if linear < 0 || len(w.meta.Calls) != 1 || removed < linear {
		t.Fatalf("events %v, metadata calls %v", w.events, w.meta.Calls)
	}
	if _, ok, _ := w.hotSets.Load(vol); !ok {
		t.Fatal("no hot set kept at detach")
	}
}

// deadlineCopies records the deadline of each copy's context.
type deadlineCopies struct {
	*blockdevfake.Devices
	deadlines []time.Duration
}

func (d *deadlineCopies) CopyExtents(ctx context.Context, src dm.DevNum, dst string, want dm.DevNum, extents []blockdev.Extent) error {
	if dl, ok := ctx.Deadline(); ok {
		d.deadlines = append(d.deadlines, time.Until(dl))
	} else {
		d.deadlines = append(d.deadlines, -1)
	}
	return d.Devices.CopyExtents(ctx, src, dst, want, extents)
}

// A warm-up on a hung HDD gives up, and its cache starts cold, instead of
// holding the volume's lock and its binding's worker for ever: its copy
// runs under a deadline that grows with the bytes it copies.
func TestWarmUpCopiesUnderADeadline(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 7, 3, 4, 5)
	w.unstageWithoutKeeping(t)
	copies := &deadlineCopies{Devices: w.dev}
	l := w.layers()
	l.Dev = copies
	w.engine = NewEngine(l, testPools, nil, WithBlockSectors(blockSecs))
	if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: w.origin(t)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.engine.SetCache(context.Background(), vol, warmCache(gib)); err != nil {
		t.Fatal(err)
	}
	want := warmDeadline(4 * blockSecs * dm.SectorSize)
	if len(copies.deadlines) != 1 || copies.deadlines[0] <= 0 || copies.deadlines[0] > want {
		t.Fatalf("copy deadlines %v, want one of at most %v", copies.deadlines, want)
	}
	if big := warmDeadline(100 << 30); big < 100*time.Second*10 {
		t.Fatalf("a 100 GiB warm-up may take %v, less than at 100 MB/s", big)
	}
}

// The dm-stats region that counts writes during a copy keeps per-CPU
// counters for every area: on a 256-CPU node a 16 TiB origin is counted in
// at most 627 areas (16 MiB of kernel memory), not 16,384 (438 MB).
func TestWriteTrackingAreasAreBoundedByTheCPUCount(t *testing.T) {
	e := NewEngine(newWorld(t).layers(), testPools, nil, WithPossibleCPUs(256))
	origin := uint64(16<<40) / dm.SectorSize
	w := newFill(blockSecs, cacheBlocks, origin, e.trackedAreas)
	if areas := (origin/blockSecs + w.areaBlocks - 1) / w.areaBlocks; areas > 627 || e.trackedAreas != dm.TrackedAreasFor(256) {
		t.Fatalf("%d areas of %d blocks on a 256-CPU node, want at most 627", areas, w.areaBlocks)
	}
}
