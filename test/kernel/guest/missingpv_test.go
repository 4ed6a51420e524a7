package guest

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// TestMissingCachePVRemovedAndReattached (#38 point 7) on the real kernel
// and LVM: a cache pool on two devices holds a volume's cache on one of
// them; that device fails (its cache LVs fail every I/O, the plugin's
// monitor drops the cache to linear) and then loses its PV label, so LVM
// reports the VG's PV missing and would refuse every lvcreate there. The
// running plugin's pool check removes the missing PV with the dropped
// cache's LVs, the configured device (blank now, as a replacement at the
// same path would be) joins the pool as a new PV, and a restage attaches a
// new cache there; the volume reads every byte written before the failure.
// Alone: SSDCACHE_GUEST_RUN='^TestMissingCachePVRemovedAndReattached$'.
func TestMissingCachePVRemovedAndReattached(t *testing.T) {
	e := guestEnv(t)
	const vg = "mpv-nvme"
	byA, nodeA := loopDisk(t, e, "mpv-a", "")
	byB, nodeB := loopDisk(t, e, "mpv-b", "")
	p := launch(t, e, filepath.Join(e.work, "mpv.sock"), []string{"--origin-devices=" + e.hdd, "--cache-vg=" + vg,
		"--cache-devices=" + byA + "," + byB, "--pool-retry-interval=1s", "--pool-scan-interval=1s", "--promote-interval=0"})
	lvmOn := fmt.Sprintf("--devices %s,%s", nodeA, nodeB) // as the plugin's LVM: the pool's devices only

	v := p.provision(t, "mpv", 32<<20, cached("16Mi"), blockCapability())
	p.stage(t, v)
	dev := cache.DevicePath(v.id)
	sh(t, "dd if=/dev/urandom of=%s bs=1M count=32 oflag=direct status=none", dev)
	want := sh(t, "dd if=%s bs=1M iflag=direct status=none | sha256sum", dev)
	sh(t, "dd if=%s of=/dev/null bs=1M iflag=direct status=none", dev) // some blocks into the cache
	dead := pvOfCache(t, lvmOn, vg, v.id)
	oldUUID := strings.TrimSpace(sh(t, "pvs %s --noheadings -o pv_uuid %s", lvmOn, dead))
	t.Logf("cache of %s on %s (PV %s): %s", v.id, dead, oldUUID, sh(t, "dmsetup status --noflush %s", cache.DeviceName(v.id)))

	// The device fails: every I/O of the cache LVs on it errors, the monitor
	// drops the cache; then the device shows no PV any more.
	for _, lv := range lvsOfVolume(t, lvmOn, vg, v.id) {
		name := lvDMName(vg, lv)
		size := sh(t, "blockdev --getsz /dev/mapper/%s", name)
		sh(t, "dmsetup suspend %s && dmsetup load %s --table '0 %s error' && dmsetup resume %s", name, name, size, name)
	}
	dropped := waitLinear(t, p, v.id)
	sh(t, "dd if=/dev/zero of=%s bs=1M count=1 oflag=direct conv=fsync status=none", dead)

	// The plugin removes the missing PV and adds the configured device again.
	removed := waitLogged(t, p, vg, "Removed the missing PVs of the cache pool")
	err := poll("the cache pool to hold two PVs, none missing", 200*time.Millisecond, func() (bool, string, error) {
		out, err := trySh("vgs %s --noheadings -o pv_count,vg_missing_pv_count %s", lvmOn, vg)
		return err == nil && strings.Join(strings.Fields(out), " ") == "2 0", out, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	newUUID := strings.TrimSpace(sh(t, "pvs %s --noheadings -o pv_uuid %s", lvmOn, dead))
	if newUUID == "" || newUUID == oldUUID {
		t.Fatalf("PV on %s is %q after the repair, want a new PV (the dead one was %s)", dead, newUUID, oldUUID)
	}
	if lvs := lvsOfVolume(t, lvmOn, vg, v.id); len(lvs) != 0 {
		t.Fatalf("the dropped cache's LVs %v are still in %s", lvs, vg)
	}
	t.Logf("cache dropped, missing PV removed %v later; %s is PV %s now; log: %s", removed.Sub(dropped).Round(100*time.Millisecond),
		dead, newUUID, lastLines(grepLines(p.log.String(), "missing PV"), 4))

	// A restage attaches a new cache in the repaired pool; every byte is there.
	p.unstage(t, v)
	p.stage(t, v)
	if tbl := table(t, v.id); tbl.Target.Type() != "cache" {
		t.Fatalf("after the repair the restaged volume's table is %q, want a cache", tbl)
	}
	for pass := 1; pass <= 2; pass++ {
		if got := sh(t, "dd if=%s bs=1M iflag=direct status=none | sha256sum", dev); got != want {
			t.Fatalf("read pass %d through the new cache: sha256 %s, want %s", pass, got, want)
		}
	}
	st := cacheStatus(t, v.id)
	t.Logf("new cache on %s: 32 MiB read twice equal to what was written; %d blocks cached, %d read hits, %d misses",
		pvOfCache(t, lvmOn, vg, v.id), st.CacheUsed, st.ReadHits, st.ReadMisses)
	removeVolume(t, p, v)
	p.stop()
	sh(t, "vgremove %s -f -y %s && pvremove %s -y %s %s", lvmOn, vg, lvmOn, nodeA, nodeB)
}

// volumeLVRows are the LVs of volume id in vg, each as its name and its
// devices (e.g. "/dev/loop3(0)"), found by the volume tag the plugin gives each.
func volumeLVRows(t *testing.T, lvmOn, vg, id string) map[string]string {
	t.Helper()
	out := sh(t, "lvs %s --noheadings --separator '|' -o lv_name,lv_tags,devices %s", lvmOn, vg)
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), lvm.VolumeTagPrefix+id) {
			rows[f[0]] = f[2]
		}
	}
	return rows
}

// lvsOfVolume are the names of volume id's LVs in vg.
func lvsOfVolume(t *testing.T, lvmOn, vg, id string) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(volumeLVRows(t, lvmOn, vg, id)))
}

// pvOfCache is the one device that holds volume id's cache LVs in vg.
func pvOfCache(t *testing.T, lvmOn, vg, id string) string {
	t.Helper()
	rows := volumeLVRows(t, lvmOn, vg, id)
	var pv string
	for lv, devices := range rows {
		for _, f := range strings.Split(devices, ",") {
			d, _, _ := strings.Cut(f, "(")
			if pv != "" && d != pv {
				t.Fatalf("cache LVs of %s span %s and %s (%s); the test needs them on one device", id, pv, d, lv)
			}
			pv = d
		}
	}
	if pv == "" {
		t.Fatalf("no cache LV of %s in %s", id, vg)
	}
	return pv
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
