package cache

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// A promotion into a cache whose mappings the engine knows never takes it
// out of service: the mappings go into a second metadata LV while it
// serves, the table is loaded again over that LV, and the LV it replaced
// is removed, so the volume keeps exactly two cache LVs and the names
// alternate from one promotion to the next.
func TestPromotionIntoAServingCacheSwapsMetadataWithoutALinearTable(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	for i, want := range []string{"pvc-1.cache-meta2", "pvc-1.cache-meta", "pvc-1.cache-meta2"} {
		if got := promoteOrder(t, w, uint64(10*i+5), uint64(10*i+6)); got != "serving" {
			t.Fatalf("promotion %d: %s, want serving throughout", i+1, got)
		}
		live := w.table(t).Target.(dm.CacheTarget)
		if path := w.metaPathOf(live.Metadata); !strings.HasSuffix(path, "/"+want) {
			t.Fatalf("promotion %d: the cache runs on metadata %q, want %s", i+1, path, want)
		}
		if lvs := w.cacheLVs(t); !slices.Equal(lvs, []string{"pvc-1.cache-data", want}) {
			t.Fatalf("promotion %d: cache LVs %v, want the data LV and %s", i+1, lvs, want)
		}
	}
	want := []dm.Mapping{{Cache: 0, Origin: 5}, {Cache: 1, Origin: 6}, {Cache: 2, Origin: 15}, {Cache: 3, Origin: 16}, {Cache: 4, Origin: 25}, {Cache: 5, Origin: 26}}
	if got := w.liveMeta(t).Mappings; !reflect.DeepEqual(got, want) {
		t.Fatalf("mappings %v, want %v", got, want)
	}
	// The mappings were written, and the table over them loaded, before
	// the suspend: the device is suspended for the swap alone.
	load, suspend := indexOf(w.events, "dm load", " cache "), indexOf(w.events, "dm suspend")
	if load < 0 || suspend != load+1 || indexOf(w.events, "dm resume") != suspend+1 {
		t.Fatalf("want the cache table loaded, then the suspend and the resume next to each other:\n%s", strings.Join(w.events, "\n"))
	}
}

// A promotion reads the write counts of its copies' areas alone, however
// large the volume and its count, before writing the mappings and again
// with the device suspended.
func TestPromotionReadsOnlyItsCopiesAreasWhileSuspended(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	if got := promoteOrder(t, w, 5, 6, 900); got != "serving" {
		t.Fatalf("promotion: %s, want serving throughout", got)
	}
	// 10 blocks an area on this volume: blocks 5 and 6 lie in area 0, 900
	// in 90. The first read is the look before the mappings are written.
	if len(w.dm.AreasAsked) != 2 || !slices.Equal(w.dm.AreasAsked[1], []uint64{0, 90}) {
		t.Fatalf("areas read %v, want the copies' [0 90] before the mappings are written and again while suspended", w.dm.AreasAsked)
	}
}

// Without room in the cache VG for a second metadata LV, the promotion maps
// its batch as before: copied while serving, mapped with the cache swapped out.
func TestPromotionWithoutRoomForSecondMetadataSwapsTheCacheOut(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	fillCacheVG(t, w, func(vg lvm.VG) uint64 { return vg.ExtentSize })
	if got := promoteOrder(t, w, 5, 6); got != "serving, swapped out to map" {
		t.Fatalf("promotion without room: %s", got)
	}
	if got := w.liveMeta(t).Mappings; len(got) != 2 {
		t.Fatalf("mappings %v, want the two promoted", got)
	}
}

// Admission charges a cache its footprint (cachesize.Footprint), which
// holds room for the second metadata LV: a pool with no more free than
// that beyond the attached cache's two LVs still takes the swap, and the
// promotion never swaps the cache out.
func TestPromotionSwapsMetadataWithinTheCachesFootprint(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	spare := fillCacheVG(t, w, func(vg lvm.VG) uint64 {
		return cachesize.Footprint(gib, vg.ExtentSize, w.engine.BlockSectors()) - cachesize.AttachedBytes(gib, vg.ExtentSize, w.engine.BlockSectors())
	})
	if got := promoteOrder(t, w, 5, 6); got != "serving" {
		t.Fatalf("promotion with the footprint's %d spare bytes free: %s, want serving throughout", spare, got)
	}
}

// fillCacheVG fills the cache VG with an LV that leaves free(vg) bytes, and returns them.
func fillCacheVG(t *testing.T, w *world, free func(lvm.VG) uint64) uint64 {
	t.Helper()
	vg, err := w.lvm.GetVG(context.Background(), "ssdcache-nvme")
	if err != nil {
		t.Fatal(err)
	}
	left := free(vg)
	if _, err := w.lvm.CreateLV(context.Background(), vg.Name, "filler", vg.Free-left, nil); err != nil {
		t.Fatal(err)
	}
	return left
}

// A second metadata LV that the live cache table does not use was left by
// a promotion cut short; the volume's next change removes it and leaves the
// cache serving as it is.
func TestPlanRemovesTheMetadataLVALivePromotionLeft(t *testing.T) {
	meta := lvm.LV{VG: "ssdcache-nvme", Name: "pvc-1.cache-meta", DevNum: dm.DevNum{Major: 253, Minor: 3}, Tags: lvm.Tags(vol, lvm.RoleCacheMetadata)}
	spare := lvm.LV{VG: "ssdcache-nvme", Name: "pvc-1.cache-meta2", DevNum: dm.DevNum{Major: 253, Minor: 5}, Tags: lvm.Tags(vol, lvm.RoleCacheMetadata)}
	data := lvm.LV{VG: "ssdcache-nvme", Name: "pvc-1.cache-data", DevNum: dm.DevNum{Major: 253, Minor: 4}, Size: gib,
		Tags: append(lvm.Tags(vol, lvm.RoleCacheData), cacheBytesTag(gib))}
	want := desired{origin: dm.DevNum{Major: 253, Minor: 1}, length: 1 << 21, cache: readCache(gib), vg: "ssdcache-nvme", minBlockSectors: blockSecs}
	meta.Size, spare.Size = want.metadataBytes(), want.metadataBytes()
	for _, live := range []lvm.LV{meta, spare} {
		table := dm.Table{Length: want.length, Target: dm.CacheTarget{Metadata: live.DevNum, Data: data.DevNum, Origin: want.origin,
			BlockSectors: want.blockSectors(), Mode: dm.Writethrough, Policy: PolicyReplacing}}
		steps := plan(observed{staged: true, table: table, cacheLVs: []lvm.LV{meta, data, spare}}, want)
		if !slices.Equal(steps, []step{stepRemoveSpareMetadata}) {
			t.Fatalf("cache live on %s: steps %v, want only %s", live.Name, steps, stepRemoveSpareMetadata)
		}
	}
	// With no live cache table, neither can be trusted to be the one in use.
	steps := plan(observed{staged: true, table: linearTable(want), cacheLVs: []lvm.LV{meta, data, spare}}, want)
	if !slices.Contains(steps, stepRemoveCacheLVs) || !slices.Contains(steps, stepZeroMetadata) {
		t.Fatalf("no live cache, two metadata LVs: steps %v, want them removed and made anew", steps)
	}
}

// A block the cache already maps and serves stays mapped when the
// application writes it during a swap's copy: writethrough wrote both the
// cache's copy and the origin's.
func TestPromotionSwappingMetadataKeepsMappedBlocksWrittenMeanwhile(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	if got := promoteOrder(t, w, 5); got != "serving" {
		t.Fatalf("first promotion: %s", got)
	}
	w.dev.Record = func(e string) {
		if strings.HasPrefix(e, "copy ") {
			w.dm.Write(DeviceName(vol), 5*blockSecs) // block 5, mapped and served
		}
	}
	res, left, err := w.engine.Promote(context.Background(), vol, []uint64{70})
	if err != nil || len(left) != 0 || res.Dropped != 0 {
		t.Fatalf("err %v, left %v, report %+v; want the batch mapped, nothing dropped", err, left, res)
	}
	if got, want := w.liveMeta(t).Mappings, []dm.Mapping{{Cache: 0, Origin: 5}, {Cache: 1, Origin: 70}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("mappings %v, want %v", got, want)
	}
}

// The monitor probes the LVs Inspect names: those of the live table only,
// so that a promotion's second metadata LV, removed a moment later, is
// never probed and taken for a failing SSD.
func TestInspectNamesOnlyTheLVsTheLiveCacheUses(t *testing.T) {
	w := promotingWorld(t)
	w.stage(t, warmCache(gib))
	w.used(t)
	if _, err := w.lvm.CreateLV(context.Background(), "ssdcache-nvme", "pvc-1.cache-meta2", 8<<20, lvm.Tags(vol, lvm.RoleCacheMetadata)); err != nil {
		t.Fatal(err)
	}
	st, err := w.engine.Inspect(context.Background(), vol)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/dev/ssdcache-nvme/pvc-1.cache-meta", "/dev/ssdcache-nvme/pvc-1.cache-data"}
	if got := slices.Sorted(slices.Values(st.CacheDevices)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("devices to probe %v, want the live table's %v", st.CacheDevices, want)
	}
}
