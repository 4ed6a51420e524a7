package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// oneDeviceCachePool is a node whose cache pool is up on one NVMe device
// holding volume pvc-1's cache LVs; the device dies: LVM no longer finds
// the VG, the kernel keeps the LVs' devices, with holders stacked on each
// (nil: the monitor dropped the cache). The next device at the configured
// path is blank, as a replacement is.
func oneDeviceCachePool(t *testing.T, holders []string) *setupWorld {
	t.Helper()
	ctx := context.Background()
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{hddByID}}},
		PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{nvmeByID}}})
	w.plugHDD()
	w.plugNVMe()
	w.setup.Attempt(ctx)
	for _, name := range []string{"pvc-1.cache-data", "pvc-1.cache-meta"} {
		lv, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", name, 1<<30, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.dev.Add("/dev/mapper/"+lvm.DMName("ssdcache-nvme", name), blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor), Holders: holders})
	}
	w.lvm.LoseVG("ssdcache-nvme")
	if err := w.watch.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	for w.nextEvent() != "" {
	}
	w.recorded, w.cacheUp = nil, nil
	return w
}

// The pool check sees the cache VG gone, removes the devices left of its
// dropped caches' LVs, tells the Node, and makes the VG again on the
// configured device at once, so the Degraded bindings' retry finds a pool.
func TestPoolSetupMakesALostSingleDeviceCachePoolAgain(t *testing.T) {
	ctx := context.Background()
	w := oneDeviceCachePool(t, nil)
	w.setup.RepairCache(ctx)
	want := []string{"lvm removedevice ssdcache--nvme-pvc--1.cache--data", "lvm removedevice ssdcache--nvme-pvc--1.cache--meta",
		"lvm createvg ssdcache-nvme[" + nvmeByID + "]"}
	if !slices.Equal(w.recorded, want) {
		t.Fatalf("changes %v, want %v", w.recorded, want)
	}
	if e := w.nextEvent(); !strings.HasPrefix(e, "Warning PoolNotReady") || !strings.Contains(e, "LVM no longer finds the cache VG") {
		t.Fatalf("first Event %q, want Warning PoolNotReady saying the VG is gone", e)
	}
	e := w.nextEvent()
	for _, part := range []string{"Normal " + ReasonStaleDevicesRemoved, "ssdcache--nvme-pvc--1.cache--data, ssdcache--nvme-pvc--1.cache--meta", "volumes pvc-1"} {
		if !strings.Contains(e, part) {
			t.Fatalf("Event %q does not say %q", e, part)
		}
	}
	if e := w.nextEvent(); !strings.HasPrefix(e, "Normal PoolReady") {
		t.Fatalf("Event %q, want Normal PoolReady", e)
	}
	if !w.setup.isUp(PoolCache) || !slices.Equal(w.cacheUp, []string{"nvme=ssdcache-nvme"}) || w.setup.deps.Watch.CacheVGLost("ssdcache-nvme") {
		t.Fatalf("the cache pool is not up again (up %v, engine told %v)", w.setup.isUp(PoolCache), w.cacheUp)
	}
	if _, err := w.lvm.CreateLV(ctx, "ssdcache-nvme", "pvc-1.cache-data", 1<<20, nil); err != nil {
		t.Fatalf("the new pool refuses pvc-1's cache LV: %v", err)
	}
	w.recorded = nil
	w.setup.RepairCache(ctx)
	if len(w.recorded) != 0 || w.nextEvent() != "" {
		t.Fatalf("a pool made again was changed again: %v", w.recorded)
	}
}

// Without the replacement the devices still go, the pool is not up and
// says why, and the set-up makes it once the device comes.
func TestPoolSetupWaitsForTheReplacementOfALostCachePool(t *testing.T) {
	ctx := context.Background()
	w := oneDeviceCachePool(t, nil)
	w.dev.Remove(nvmeByID)
	w.setup.RepairCache(ctx)
	if len(w.recorded) != 2 || !strings.HasPrefix(w.recorded[1], "lvm removedevice") {
		t.Fatalf("changes %v without the device, want the two devices removed", w.recorded)
	}
	if w.setup.isUp(PoolCache) || w.poolReady(t, PoolCache) != 0 {
		t.Fatal("the lost cache pool is still reported up")
	}
	w.plugNVMe()
	w.setup.Attempt(ctx)
	if !w.setup.isUp(PoolCache) || len(w.recorded) != 3 || w.recorded[2] != "lvm createvg ssdcache-nvme["+nvmeByID+"]" {
		t.Fatalf("after the device came: up %v, changes %v", w.setup.isUp(PoolCache), w.recorded)
	}
}

// Safety: while a table still uses a lost cache LV's device nothing is
// removed and no VG made, the Node hears why once, and both happen once the
// cache is dropped.
func TestPoolSetupKeepsTheDevicesOfALostCachePoolWhileATableUsesThem(t *testing.T) {
	ctx := context.Background()
	w := oneDeviceCachePool(t, []string{"dm-9"})
	w.setup.RepairCache(ctx)
	w.setup.Attempt(ctx)
	if len(w.recorded) != 0 {
		t.Fatalf("changes %v while a table uses a lost LV's device", w.recorded)
	}
	var refusals int
	for e := w.nextEvent(); e != ""; e = w.nextEvent() {
		if strings.HasPrefix(e, "Warning "+ReasonStaleDevicesNotRemoved) {
			refusals++
			if !strings.Contains(e, "used by dm-9") {
				t.Fatalf("Event %q does not name the table's device", e)
			}
		}
	}
	if refusals != 1 {
		t.Fatalf("the refusal was told %d times, want once", refusals)
	}
	for _, name := range []string{"pvc-1.cache-data", "pvc-1.cache-meta"} {
		w.dev.Add("/dev/mapper/"+lvm.DMName("ssdcache-nvme", name), blockdevfake.Device{Node: "/dev/dm-1"}) // dropped: no holder
	}
	w.setup.Attempt(ctx)
	if len(w.recorded) != 3 || !w.setup.isUp(PoolCache) {
		t.Fatalf("after the drop: changes %v, up %v; want both devices removed and the VG made", w.recorded, w.setup.isUp(PoolCache))
	}
}

// A Degraded binding whose single-device cache pool died is not retried
// while LVM finds no pool, and is attached again once, under the same LV
// names, after the devices left of its dropped cache's LVs were removed
// and the pool made again; RemoveStale recognises the names the engine gave
// them.
func TestDegradedBindingRetriedOnceAfterItsLostPoolWasMadeAgain(t *testing.T) {
	ctx := context.Background()
	w := newRetryWorld(t)
	lvs, err := lvm.VolumeLVs(ctx, w.n.lvm, "nvme", vol)
	if err != nil || len(lvs) != 2 {
		t.Fatalf("cache LVs of the dropped cache: %v %v", lvs, err)
	}
	for _, lv := range lvs {
		w.n.dev.Add("/dev/mapper/"+lvm.DMName("nvme", lv.Name), blockdevfake.Device{Node: fmt.Sprintf("/dev/dm-%d", lv.DevNum.Minor)}) // dropped: no holder
	}
	w.n.lvm.LoseVG("nvme")
	reconcileOnce(t, w.r)
	if got := w.table(t); got != "linear" || get(t, w.c).Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("retried while LVM finds no cache pool: table %s, %+v", got, get(t, w.c).Status)
	}

	const newDevice = "/dev/disk/by-id/nvme-new"
	w.n.dev.Add(newDevice, blockdevfake.Device{Node: "/dev/nvme1n1", Size: 1 << 40})
	pools := lvm.NewPools(w.n.lvm, w.n.dev)
	stale, err := pools.RemoveStale(ctx, "nvme", PoolCache)
	if err != nil || len(stale.Devices) != 2 || !slices.Equal(stale.Volumes(), []string{vol}) {
		t.Fatalf("RemoveStale: %+v %v, want the dropped cache's two LV devices", stale, err)
	}
	if _, err := pools.Ensure(ctx, lvm.PoolConfig{VG: "nvme", Role: PoolCache, Devices: []string{newDevice}}); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, w.r)
	wantRetried(t, w, 1)
	now, err := lvm.VolumeLVs(ctx, w.n.lvm, "nvme", vol)
	if err != nil || !slices.Equal(lvm.Names(now), lvm.Names(lvs)) {
		t.Fatalf("new cache LVs %v (%v), want the same names as the lost ones %v", lvm.Names(now), err, lvm.Names(lvs))
	}
}
