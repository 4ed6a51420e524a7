package cache

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func (w *world) setCache(t *testing.T, spec *Spec) Result {
	t.Helper()
	res, err := w.engine.SetCache(context.Background(), vol, spec)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func pausedCache(size uint64) *Spec { return &Spec{SizeBytes: size, Mode: ModePaused, Warm: true} }

func (w *world) countingUncachedWrites(t *testing.T) bool {
	t.Helper()
	_, ok, err := w.dm.UncachedWrites(context.Background(), DeviceName(vol))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// Resuming a paused cache maps again what it held, reading nothing from
// the origin, but for the blocks in areas written while it was out; a
// restart of the plugin in between changes nothing, as the count lives in
// the kernel.
func TestResumeMapsTheKeptBlocksButThoseWrittenWhilePaused(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25) // tracking areas of 10 blocks on this 10 GiB volume: areas 0 and 2
	w.setCache(t, pausedCache(gib))
	w.dm.Write(DeviceName(vol), 25*blockSecs+3)
	w.restart()
	w.dev.Copied = nil

	res := w.setCache(t, warmCache(gib))
	if r := res.Warmed; r.Kept != 1 || r.Dropped != 1 || r.Blocks != 0 || len(w.dev.Copied) != 0 {
		t.Fatalf("resume: %+v, copies %v; want block 4 kept, block 25 (written while paused) left out, nothing copied", r, w.dev.Copied)
	}
	if got := originsOf(w.liveMeta(t).Mappings); !reflect.DeepEqual(got, []uint64{4}) {
		t.Fatalf("the resumed cache maps origin blocks %v, want [4]", got)
	}
	if w.countingUncachedWrites(t) {
		t.Fatal("the count of writes made while paused outlived the resume")
	}
}

// The count starts while the cache still serves: a write between the swap
// to linear and the start of the count would reach the origin unseen, and
// the resumed cache would serve the block's old content.
func TestPauseCountsWritesBeforeTheCacheGoesOut(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.events = nil
	w.setCache(t, pausedCache(gib))
	track := slices.IndexFunc(w.events, func(e string) bool { return strings.HasPrefix(e, "dm track-uncached-writes ") })
	linear := slices.IndexFunc(w.events, func(e string) bool { return strings.HasPrefix(e, "dm load ") && strings.Contains(e, " linear ") })
	if track < 0 || linear < 0 || track > linear {
		t.Fatalf("the pause counted writes at event %d and loaded the linear table at %d, want counting first:\n%s", track, linear, strings.Join(w.events, "\n"))
	}
	if w.setCache(t, pausedCache(gib)).Changed || !w.countingUncachedWrites(t) {
		t.Fatal("pausing again changed the paused cache or stopped its count")
	}
}

// A device made again (after a reboot or an unstage) has no count, so
// nothing vouches for the kept LVs: the resume zeroes their metadata and
// fills the cache from the hot set, as any new cache (safety rule 2).
func TestResumeWithoutACountRefillsFromTheHotSet(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	w.setCache(t, pausedCache(gib))
	if err := w.dm.Remove(context.Background(), DeviceName(vol)); err != nil {
		t.Fatal(err)
	}
	w.restart()
	w.stage(t, nil)
	w.events = nil

	res := w.setCache(t, warmCache(gib))
	if r := res.Warmed; r.Kept != 0 || r.Blocks != 2 || !hasZeroOf(w.events, metaPath) {
		t.Fatalf("resume without a count: %+v; want metadata zeroed and both blocks copied from the origin\n%s", r, strings.Join(w.events, "\n"))
	}
}

func hasZeroOf(events []string, path string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, "zero") && strings.Contains(e, path) })
}

// Kept metadata that cannot be read is not mapped: the resume fills the
// cache anew from the hot set and stops the count.
func TestResumeOfUnreadableKeptMetadataRefills(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	w.setCache(t, pausedCache(gib))
	w.meta.Forget(metaPath)

	res := w.setCache(t, warmCache(gib))
	if r := res.Warmed; r.Kept != 0 || r.Blocks != 2 {
		t.Fatalf("resume over unreadable metadata: %+v; want both hot blocks copied from the origin", r)
	}
	if w.countingUncachedWrites(t) {
		t.Fatal("a resume that could not map the kept blocks left the count of writes behind")
	}
}

// The count vouches for the LVs it was started beside: replacing them
// (a new size while paused) or removing them (a detach) stops it, so a
// later resume never maps what new LVs happen to hold.
func TestTheCountGoesWithTheLVsItVouchesFor(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4)
	w.setCache(t, pausedCache(gib))
	w.setCache(t, pausedCache(2*gib))
	if w.countingUncachedWrites(t) {
		t.Fatal("new cache LVs of a paused volume kept the count of the ones they replaced")
	}
	if r := w.setCache(t, warmCache(2*gib)).Warmed; r.Kept != 0 {
		t.Fatalf("a resume over replaced LVs kept %d blocks", r.Kept)
	}

	w.setCache(t, pausedCache(2*gib))
	w.setCache(t, nil)
	if w.countingUncachedWrites(t) {
		t.Fatal("detaching a paused cache left its count of writes behind")
	}
}

func (w *world) unstage(t *testing.T) {
	t.Helper()
	if err := w.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
}

// A clean unstage keeps the cache; the next stage counts writes before it
// returns (before any mount), so the attach after it, even by a restarted
// plugin, maps the kept blocks again but for those written in between,
// and reads nothing from the origin.
func TestRestageMapsTheKeptBlocksButThoseWrittenBeforeTheAttach(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	w.unstage(t)
	w.stage(t, nil)
	if obs := w.mustObserve(t); !w.countingUncachedWrites(t) || len(obs.cacheLVs) != 2 {
		t.Fatalf("restaged: cache LVs %v, counting writes %v; want the kept pair and a count", obs.cacheLVs, w.countingUncachedWrites(t))
	}
	if _, tagged := taggedClean(w.mustObserve(t).cacheLVs); tagged {
		t.Fatal("the stage left the clean-unstage tag, which a reboot would then trust")
	}
	w.dm.Write(DeviceName(vol), 25*blockSecs) // the filesystem, mounted linear before the agent attaches
	w.restart()
	w.dev.Copied = nil

	r := w.setCache(t, warmCache(gib)).Warmed
	if r.Kept != 1 || r.Dropped != 1 || r.Blocks != 0 || len(w.dev.Copied) != 0 {
		t.Fatalf("attach after restage: %+v, copies %v; want block 4 kept, block 25 left out, nothing copied", r, w.dev.Copied)
	}
	if got := originsOf(w.liveMeta(t).Mappings); !reflect.DeepEqual(got, []uint64{4}) {
		t.Fatalf("the cache maps origin blocks %v after the restage, want [4]", got)
	}
}

// A node that rebooted while the volume was unstaged, without LVM's
// autoactivation, has the kept pair inactive: the stage activates it and
// keeps it as if it had stayed active.
func TestRestageActivatesTheKeptLVsABootLeftInactive(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	w.unstage(t)
	w.restart()
	w.lvm.Deactivate("ssdcache-nvme", vol+".cache-meta")
	w.lvm.Deactivate("ssdcache-nvme", vol+".cache-data")
	w.stage(t, nil)
	w.dev.Copied = nil
	r := w.setCache(t, warmCache(gib)).Warmed
	if r.Kept != 2 || r.Blocks != 0 || len(w.dev.Copied) != 0 {
		t.Fatalf("attach after a boot that left the kept LVs inactive: %+v, copies %v; want both blocks kept, nothing copied", r, w.dev.Copied)
	}
}

func (w *world) mustObserve(t *testing.T) observed {
	t.Helper()
	obs, err := w.engine.observe(context.Background(), vol)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// The device of a volume staged when the node went down is gone after the
// reboot, and its count with it; the stage deleted the tag: nothing
// vouches for the kept LVs, which are zeroed and filled from the hot set.
func TestRebootWhileStagedRefillsTheKeptLVs(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	w.unstage(t)
	w.stage(t, nil)
	if err := w.dm.Remove(context.Background(), DeviceName(vol)); err != nil { // the reboot
		t.Fatal(err)
	}
	w.restart()
	w.stage(t, nil)
	if w.countingUncachedWrites(t) {
		t.Fatal("a stage after a reboot counts writes for LVs nothing vouches for")
	}
	w.events = nil
	r := w.setCache(t, warmCache(gib)).Warmed
	if r.Kept != 0 || r.Blocks != 2 || !hasZeroOf(w.events, metaPath) {
		t.Fatalf("attach after a reboot: %+v; want the metadata zeroed and both hot blocks copied\n%s", r, strings.Join(w.events, "\n"))
	}
}

// A cache in front of anything but the volume's own origin LV (a static
// disk, which others may write while it is unstaged) is not kept.
func TestUnstageKeepsNoCacheOfAStaticDisk(t *testing.T) {
	w := newWorld(t)
	disk, err := w.lvm.CreateLV(context.Background(), "ssdcache-hdd", "disk", gib, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: Origin{Path: disk.Path, DevNum: disk.DevNum, Bytes: disk.Size}}); err != nil {
		t.Fatal(err)
	}
	w.setCache(t, readCache(gib))
	w.unstage(t)
	if lvs := w.cacheLVs(t); len(lvs) != 0 {
		t.Fatalf("the cache of a static disk kept its LVs %v", lvs)
	}
}

// A resume writes the kept mappings before it suspends the volume
// (cache_restore takes seconds on a large cache); only a write to a kept
// block after that makes it write them again with the volume's I/O held.
func TestResumeWritesTheKeptMappingsBeforeTheSuspend(t *testing.T) {
	w := newWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25, 60) // tracking areas 0, 2 and 6
	w.setCache(t, pausedCache(gib))
	w.dm.Write(DeviceName(vol), 25*blockSecs)
	atSuspend, record := -1, w.dm.Record
	w.dm.Record = func(e string) {
		if strings.HasPrefix(e, "dm suspend") {
			atSuspend = len(restores(w.meta.Calls))
		}
		record(e)
	}
	before := len(restores(w.meta.Calls))
	r := w.setCache(t, warmCache(gib)).Warmed
	if n := len(restores(w.meta.Calls)) - before; r.Kept != 2 || r.Dropped != 1 || n != 1 || atSuspend != before+1 {
		t.Fatalf("quiet resume: %+v, %d metadata writes, %d of them before the suspend; want 2 kept, 1 left out, one write before it", r, n, atSuspend-before)
	}

	w.setCache(t, pausedCache(gib))
	w.faults = faultsFunc(func(_ context.Context, point string) {
		if point == "attach/load-cache" { // after the mappings were written ahead
			w.dm.Write(DeviceName(vol), 60*blockSecs)
		}
	})
	before = len(restores(w.meta.Calls))
	r = w.setCache(t, warmCache(gib)).Warmed
	if n := len(restores(w.meta.Calls)) - before; r.Kept != 1 || r.Dropped != 1 || n != 2 || atSuspend != before+1 {
		t.Fatalf("resume with a late write: %+v, %d metadata writes, %d before the suspend; want block 60 left out at the suspend, written again then", r, n, atSuspend-before)
	}
	if got := originsOf(w.liveMeta(t).Mappings); !reflect.DeepEqual(got, []uint64{4}) {
		t.Fatalf("the resumed cache maps %v, want [4]", got)
	}
}
