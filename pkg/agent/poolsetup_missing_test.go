package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

const nvme2ByID = "/dev/disk/by-id/nvme-Samsung_SSD_980_S2"

// twoDeviceCachePool is a node whose cache pool is up on two NVMe devices,
// with volume pvc-1's cache LVs on the second one, which then dies: LVM
// reports its PV missing and the LVs partial. Those LVs are active; holders
// are what the kernel lists as stacked on each (nil: the cache was dropped).
func twoDeviceCachePool(t *testing.T, holders []string) *setupWorld {
	t.Helper()
	ctx := context.Background()
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{hddByID}}},
		PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{nvmeByID, nvme2ByID}}})
	w.plugHDD()
	w.plugNVMe()
	w.dev.Add(nvme2ByID, blockdevfake.Device{Node: "/dev/nvme1n1", Size: 1 << 40, Model: "Samsung SSD 980"})
	w.setup.Attempt(ctx)
	for _, name := range []string{"pvc-1.cache-data", "pvc-1.cache-meta"} {
		role := lvm.RoleCacheData
		if strings.HasSuffix(name, "meta") {
			role = lvm.RoleCacheMetadata
		}
		lv, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", name, 1<<30, lvm.Tags("pvc-1", role))
		if err != nil {
			t.Fatal(err)
		}
		w.dev.Add(lv.Path, blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor), Holders: holders})
	}
	w.lvm.LosePV("ssdcache-nvme", nvme2ByID, "pvc-1.cache-data", "pvc-1.cache-meta")
	if err := w.watch.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	for w.nextEvent() != "" {
	}
	w.recorded = nil
	return w
}

// The dead device's PV goes, with the cache LVs of the caches dropped from
// it, the Node is told what went, and the pool is set up again: the
// configured device, blank again (its replacement at the same path), joins,
// and the pool takes cache LVs again.
func TestPoolSetupRemovesAMissingPVOfDroppedCaches(t *testing.T) {
	ctx := context.Background()
	w := twoDeviceCachePool(t, nil)
	if _, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", "pvc-2.cache-data", 1<<20, nil); err == nil {
		t.Fatal("the fake LVM let a VG with a missing PV be changed")
	}
	w.recorded = nil
	w.setup.RepairCache(ctx)
	want := []string{"lvm reducemissing ssdcache-nvme", "lvm extendvg ssdcache-nvme[" + nvme2ByID + "]"}
	if !slices.Equal(w.recorded, want) {
		t.Fatalf("LVM changes %v, want %v", w.recorded, want)
	}
	e := w.nextEvent()
	for _, part := range []string{"Normal " + ReasonMissingPVRemoved, "removed 1 missing PV", "pvc-1.cache-data, pvc-1.cache-meta", "volumes pvc-1"} {
		if !strings.Contains(e, part) {
			t.Fatalf("Event %q does not say %q", e, part)
		}
	}
	if pvs, _ := w.lvm.ListPVs(ctx); !slices.Contains(pvs, lvm.PV{Name: "/dev/nvme1n1", VG: "ssdcache-nvme"}) {
		t.Errorf("PVs %v: the configured device did not join the pool again", pvs)
	}
	if got := w.watch.MissingPVs("ssdcache-nvme"); got != 0 {
		t.Errorf("the watch still sees %d missing PVs", got)
	}
	if _, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", "pvc-2.cache-data", 1<<20, nil); err != nil {
		t.Fatalf("the repaired pool still refuses a cache LV: %v", err)
	}
	w.recorded = nil
	w.setup.RepairCache(ctx)
	if len(w.recorded) != 0 || w.nextEvent() != "" {
		t.Fatalf("a repaired pool was changed again: %v", w.recorded)
	}
}

// Safety: while a device-mapper table still uses a cache LV on the missing
// PV (its cache was not dropped yet), nothing is removed, the Node hears
// why once, and the removal happens once the cache is dropped.
func TestPoolSetupKeepsAMissingPVWhileATableUsesItsLVs(t *testing.T) {
	ctx := context.Background()
	w := twoDeviceCachePool(t, []string{"dm-9"})
	w.setup.RepairCache(ctx)
	w.setup.RepairCache(ctx)
	if len(w.recorded) != 0 {
		t.Fatalf("LVM changed while a table uses an LV on the missing PV: %v", w.recorded)
	}
	e := w.nextEvent()
	if !strings.HasPrefix(e, "Warning "+ReasonMissingPVNotRemoved) || !strings.Contains(e, "used by dm-9") {
		t.Fatalf("Event = %q, want Warning %s naming the table's device", e, ReasonMissingPVNotRemoved)
	}
	if e := w.nextEvent(); e != "" {
		t.Fatalf("the refusal was told twice: %q", e)
	}
	for _, name := range []string{"pvc-1.cache-data", "pvc-1.cache-meta"} {
		lv, err := lvm.FindLV(ctx, w.lvm, "ssdcache-nvme", name)
		if err != nil {
			t.Fatal(err)
		}
		w.dev.Add(lv.Path, blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor)}) // dropped: no holder
	}
	w.setup.RepairCache(ctx)
	if len(w.recorded) == 0 || w.recorded[0] != "lvm reducemissing ssdcache-nvme" {
		t.Fatalf("LVM changes %v after the drop, want the missing PV removed", w.recorded)
	}
}

// A pool set up again after the removal whose configured device is gone
// (no replacement yet) goes on with its survivor, and says so.
func TestPoolSetupGoesOnWithTheSurvivorsWithoutAReplacement(t *testing.T) {
	ctx := context.Background()
	w := twoDeviceCachePool(t, nil)
	w.dev.Remove(nvme2ByID)
	w.setup.RepairCache(ctx)
	if !slices.Equal(w.recorded, []string{"lvm reducemissing ssdcache-nvme"}) {
		t.Fatalf("LVM changes %v, want only the removal", w.recorded)
	}
	_ = w.nextEvent() // MissingPVRemoved
	if e := w.nextEvent(); !strings.HasPrefix(e, "Warning "+ReasonPoolNotExtended) || !strings.Contains(e, nvme2ByID) {
		t.Fatalf("Event = %q, want Warning %s naming the device", e, ReasonPoolNotExtended)
	}
	if !w.setup.isUp(PoolCache) || w.poolReady(t, PoolCache) != 1 {
		t.Fatalf("the cache pool is not up on its survivor any more")
	}
	if devs := w.lvmDevs.get(); !slices.Contains(devs, nvmeByID) {
		t.Fatalf("LVM devices %v lost the survivor %s", devs, nvmeByID)
	}
}
