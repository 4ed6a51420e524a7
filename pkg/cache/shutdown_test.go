package cache

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// shutDown is the node plugin's SIGTERM on a world whose live cache's
// metadata has its clean flag as clean says: the engine marks what it may.
func (w *world) shutDown(t *testing.T, clean bool) []string {
	t.Helper()
	w.meta.SetSuperblock(metaPath, dm.CacheSuperblock{CleanShutdown: clean, Version: 2})
	marked, err := w.engine.MarkCleanShutdown(context.Background(), NewVolumeLocks())
	if err != nil {
		t.Fatal(err)
	}
	return marked
}

// reboot removes the volume's device, which commits the cache's metadata
// with the clean flag set when removedCleanly (a clean shutdown's detach
// of dm devices) and leaves it as it was otherwise (a power loss), and
// starts an engine of the next boot.
func (w *world) reboot(t *testing.T, removedCleanly bool) {
	t.Helper()
	if err := w.dm.Remove(context.Background(), DeviceName(vol)); err != nil {
		t.Fatal(err)
	}
	if removedCleanly {
		w.meta.SetSuperblock(metaPath, dm.CacheSuperblock{CleanShutdown: true, Version: 2})
	}
	w.engineOpts = append(w.engineOpts, WithBootID("boot-2"))
	w.restart()
}

func (w *world) metaTags(t *testing.T) []string {
	t.Helper()
	for _, lv := range w.mustObserve(t).cacheLVs {
		if lv.Path == metaPath {
			return lv.Tags
		}
	}
	t.Fatalf("no metadata LV %s", metaPath)
	return nil
}

func newBootWorld(t *testing.T) *world {
	w := newWorld(t)
	w.engineOpts = append(w.engineOpts, WithBootID("boot-1"))
	w.restart()
	w.stage(t, warmCache(gib))
	w.used(t, 4, 25)
	return w
}

// A cache marked at the plugin's shutdown whose device a clean shutdown
// then removed comes back after the reboot as after a clean unstage: the
// stage counts writes before anything mounts, and the attach maps the
// kept blocks again, reading nothing from the origin; also where LVM left
// the cache LVs inactive at boot (no autoactivation).
func TestCleanRebootKeepsTheCacheMarkedAtShutdown(t *testing.T) {
	for _, autoactivated := range []bool{true, false} {
		t.Run(fmt.Sprintf("autoactivated=%v", autoactivated), func(t *testing.T) {
			w := newBootWorld(t)
			if marked := w.shutDown(t, false); !reflect.DeepEqual(marked, []string{vol}) {
				t.Fatalf("marked %v at shutdown, want [%s]", marked, vol)
			}
			if tags := w.metaTags(t); !slices.Contains(tags, ShutdownTagPrefix+"boot-1") {
				t.Fatalf("metadata LV tags %v, want the mark of boot-1", tags)
			}
			w.reboot(t, true)
			if !autoactivated {
				w.lvm.Deactivate("ssdcache-nvme", vol+".cache-meta")
				w.lvm.Deactivate("ssdcache-nvme", vol+".cache-data")
			}
			w.stage(t, nil)
			if tags := w.metaTags(t); slices.ContainsFunc(tags, func(s string) bool { return strings.HasPrefix(s, ShutdownTagPrefix) }) || !w.countingUncachedWrites(t) {
				t.Fatalf("after the stage: tags %v, counting writes %v; want the mark gone and writes counted", tags, w.countingUncachedWrites(t))
			}
			w.dm.Write(DeviceName(vol), 25*blockSecs) // mounted linear before the attach
			w.dev.Copied = nil
			r := w.setCache(t, warmCache(gib)).Warmed
			if r.Kept != 1 || r.Dropped != 1 || r.Blocks != 0 || len(w.dev.Copied) != 0 {
				t.Fatalf("attach after a clean reboot: %+v, copies %v; want block 4 kept, block 25 left out, nothing copied", r, w.dev.Copied)
			}
		})
	}
}

// A power loss after the mark leaves the flag as the mark found it,
// clear: the stage deletes the mark, and the cache is zeroed and filled
// from the hot set (safety rule 2).
func TestPowerLossAfterTheMarkRefills(t *testing.T) {
	w := newBootWorld(t)
	w.shutDown(t, false)
	w.reboot(t, false)
	w.stage(t, nil)
	if tags := w.metaTags(t); slices.ContainsFunc(tags, func(s string) bool { return strings.HasPrefix(s, "ssdcache.io/") && !strings.Contains(s, "=") }) || w.countingUncachedWrites(t) {
		t.Fatalf("after the stage: tags %v, counting writes %v; want neither mark nor clean-unstage tag, and no count", tags, w.countingUncachedWrites(t))
	}
	w.events = nil
	r := w.setCache(t, warmCache(gib)).Warmed
	if r.Kept != 0 || r.Blocks != 2 || !hasZeroOf(w.events, metaPath) {
		t.Fatalf("attach after a power loss: %+v; want the metadata zeroed and both hot blocks copied\n%s", r, strings.Join(w.events, "\n"))
	}
}

// A suspend and resume of the same table leaves the flag set while the
// cache serves: a removal could not be told from a power loss, so the
// shutdown marks nothing, and the reboot refills.
func TestNoMarkWhileASuspendLeftTheFlagSet(t *testing.T) {
	w := newBootWorld(t)
	if marked := w.shutDown(t, true); len(marked) != 0 {
		t.Fatalf("marked %v with the clean flag already set", marked)
	}
	w.reboot(t, true)
	w.stage(t, nil)
	if w.countingUncachedWrites(t) {
		t.Fatal("the stage trusts an unmarked cache after a reboot")
	}
}

// A volume whose lock a call still holds at shutdown is not marked: that
// call could suspend the device after the mark.
func TestNoMarkOfAVolumeACallStillHolds(t *testing.T) {
	w := newBootWorld(t)
	w.meta.SetSuperblock(metaPath, dm.CacheSuperblock{Version: 2})
	locks := NewVolumeLocks()
	locks.TryAcquire(vol)
	if marked, err := w.engine.MarkCleanShutdown(context.Background(), locks); err != nil || len(marked) != 0 {
		t.Fatalf("marked %v (%v) while a call held the volume", marked, err)
	}
}

// A plugin restarted in the same boot deletes its predecessor's marks
// from a cache VG before it can suspend anything there; a mark of another
// boot stays for the volume's next stage to judge.
func TestARestartedPluginForgetsTheMarksOfItsBoot(t *testing.T) {
	w := newBootWorld(t)
	w.shutDown(t, false)
	ctx := context.Background()
	other := "ssdcache-nvme/" + vol + ".other"
	lv, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", vol+".other", gib, []string{ShutdownTagPrefix + "boot-0"})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(w.layers(), Pools{OriginVG: testPools.OriginVG, DefaultClass: testPools.DefaultClass}, nil, WithBlockSectors(blockSecs), WithBootID("boot-1"))
	if err := e.AddCachePool(ctx, "nvme", "ssdcache-nvme"); err != nil {
		t.Fatal(err)
	}
	if tags := w.metaTags(t); slices.Contains(tags, ShutdownTagPrefix+"boot-1") {
		t.Fatalf("the restarted plugin kept its boot's mark: %v", tags)
	}
	lvs, _ := w.lvm.ListLVs(ctx, "ssdcache-nvme")
	for _, l := range lvs {
		if l.Name == lv.Name && !slices.Contains(l.Tags, ShutdownTagPrefix+"boot-0") {
			t.Fatalf("%s lost the mark of another boot: %v", other, l.Tags)
		}
	}
}

// The node plugin forgets its boot's marks from its cache VG before its
// components start, whether or not the pool is set up yet; a VG that does
// not exist has none to forget.
func TestForgetShutdownMarksOfAMissingVGIsNothing(t *testing.T) {
	w := newBootWorld(t)
	w.shutDown(t, false)
	if err := w.engine.ForgetShutdownMarks(context.Background(), "no-such-vg"); err != nil {
		t.Fatalf("a VG that does not exist: %v", err)
	}
	if err := w.engine.ForgetShutdownMarks(context.Background(), "ssdcache-nvme"); err != nil {
		t.Fatal(err)
	}
	if tags := w.metaTags(t); slices.Contains(tags, ShutdownTagPrefix+"boot-1") {
		t.Fatalf("the mark of this boot outlived ForgetShutdownMarks: %v", tags)
	}
}

// listCounter counts the LVM listings an engine makes.
type listCounter struct {
	lvm.Interface
	lists int
}

func (c *listCounter) ListLVs(ctx context.Context, vg string) ([]lvm.LV, error) {
	c.lists++
	return c.Interface.ListLVs(ctx, vg)
}

// kubelet kills the plugin soon after SIGTERM, so marking a node's caches
// costs one listing per VG and one lvchange, however many volumes it has.
func TestMarkingManyCachesIsOneListingPerVGAndOneLvchange(t *testing.T) {
	w := newBootWorld(t)
	ctx := context.Background()
	vols := []string{vol}
	for i := 2; i <= 6; i++ {
		id := fmt.Sprintf("pvc-%d", i)
		origin, err := w.lvm.CreateLV(ctx, "ssdcache-hdd", id, gib, lvm.Tags(id, lvm.RoleOrigin))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.engine.Stage(ctx, StageSpec{VolumeID: id, Origin: Origin{Path: origin.Path, DevNum: origin.DevNum, Bytes: origin.Size}}); err != nil {
			t.Fatal(err)
		}
		if err := w.engine.Attach(ctx, id, *readCache(gib / 8)); err != nil {
			t.Fatal(err)
		}
		w.meta.SetSuperblock("/dev/ssdcache-nvme/"+id+".cache-meta", dm.CacheSuperblock{Version: 2})
		vols = append(vols, id)
	}
	w.meta.SetSuperblock(metaPath, dm.CacheSuperblock{Version: 2})
	counter := &listCounter{Interface: w.lvm}
	layers := w.layers()
	layers.LVM = counter
	e := NewEngine(layers, testPools, nil, WithBlockSectors(blockSecs), WithBootID("boot-1"))
	w.events = nil
	marked, err := e.MarkCleanShutdown(ctx, NewVolumeLocks())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(marked)
	if !reflect.DeepEqual(marked, vols) {
		t.Fatalf("marked %v, want %v", marked, vols)
	}
	lvchanges := lvmEvents(w.events)
	if counter.lists != 2 || len(lvchanges) != 1 || strings.Count(lvchanges[0], ".cache-meta") != len(vols) {
		t.Fatalf("%d listings and LVM changes %q; want 2 listings (the cache VG and the origin VG) and one lvchange of %d metadata LVs", counter.lists, lvchanges, len(vols))
	}
	if err := e.ForgetShutdownMarks(ctx, "ssdcache-nvme"); err != nil {
		t.Fatal(err)
	}
	if forget := lvmEvents(w.events)[len(lvchanges):]; len(forget) != 1 {
		t.Fatalf("ForgetShutdownMarks made the LVM changes %q for %d marks; want one lvchange", forget, len(vols))
	}
	if tags := w.metaTags(t); slices.Contains(tags, ShutdownTagPrefix+"boot-1") {
		t.Fatalf("the mark outlived ForgetShutdownMarks: %v", tags)
	}
}

func lvmEvents(events []string) []string {
	return slices.DeleteFunc(slices.Clone(events), func(e string) bool { return !strings.HasPrefix(e, "lvm ") })
}
