package guest

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
)

// TestLostSingleDeviceCachePoolMadeAgain (#38 point 7) on the real kernel
// and LVM: a cache pool on one device holds a volume's cache; the device
// fails (its cache LVs fail every I/O, the monitor drops the cache to
// linear), loses its PV label and goes away, so LVM no longer finds the VG
// at all while the kernel keeps the LVs' devices and LVM's /dev/<vg> links.
// A new device appears at the configured path: the running plugin removes
// the dead LVs' devices, makes the cache VG anew on the new device, and a
// restage attaches a new cache there under the same LV names; the volume
// reads every byte written before the failure.
// Alone: SSDCACHE_GUEST_RUN='^TestLostSingleDeviceCachePoolMadeAgain$'.
func TestLostSingleDeviceCachePoolMadeAgain(t *testing.T) {
	e := guestEnv(t)
	const vg = "lost-nvme"
	byA, nodeA := loopDisk(t, e, "lost-a", "")
	p := launch(t, e, filepath.Join(e.work, "lost.sock"), []string{"--origin-devices=" + e.hdd, "--cache-vg=" + vg,
		"--cache-devices=" + byA, "--pool-retry-interval=1s", "--pool-scan-interval=1s", "--promote-interval=0"})

	v := p.provision(t, "lost", 32<<20, cached("16Mi"), blockCapability())
	p.stage(t, v)
	dev := cache.DevicePath(v.id)
	sh(t, "dd if=/dev/urandom of=%s bs=1M count=32 oflag=direct status=none", dev)
	want := sh(t, "dd if=%s bs=1M iflag=direct status=none | sha256sum", dev)
	sh(t, "dd if=%s of=/dev/null bs=1M iflag=direct status=none", dev) // some blocks into the cache
	lvs := lvsOfVolume(t, "--devices "+nodeA, vg, v.id)
	if len(lvs) != 2 {
		t.Fatalf("cache LVs of %s: %v, want data and metadata", v.id, lvs)
	}
	oldUUIDs := map[string]string{}
	for _, lv := range lvs {
		name := lvDMName(vg, lv)
		oldUUIDs[name] = strings.TrimSpace(sh(t, "dmsetup info -c --noheadings -o uuid %s", name))
	}

	// The device fails: every I/O of its cache LVs errors, the monitor drops
	// the cache; then it shows no PV and goes away.
	for name := range oldUUIDs {
		size := sh(t, "blockdev --getsz /dev/mapper/%s", name)
		sh(t, "dmsetup suspend %s && dmsetup load %s --table '0 %s error' && dmsetup resume %s", name, name, size, name)
	}
	dropped := waitLinear(t, p, v.id)
	sh(t, "dd if=/dev/zero of=%s bs=1M count=1 oflag=direct conv=fsync status=none", nodeA)
	sh(t, "rm -f %s && losetup -d %s", byA, nodeA)
	if out, err := trySh("vgs --devices %s %s", nodeA, vg); err == nil {
		t.Fatalf("LVM still finds %s without its device:\n%s", vg, out)
	}
	t.Logf("device gone; the kernel keeps: %s", sh(t, "dmsetup info -c --noheadings -o name,uuid,open | grep '^%s' || true", strings.ReplaceAll(vg, "-", "--")))

	// A new device at the configured path: the plugin removes the dead LVs'
	// devices and makes the pool again on it.
	_, nodeB := loopDisk(t, e, "lost-b", "")
	sh(t, "ln -sf %s %s", nodeB, byA)
	removed := waitLogged(t, p, vg, "Removed the devices left of the lost cache pool's LVs")
	err := poll("the cache pool made again on the new device", 200*time.Millisecond, func() (bool, string, error) {
		out, err := trySh("vgs --devices %s --noheadings -o pv_count,vg_missing_pv_count,vg_tags %s", nodeB, vg)
		return err == nil && strings.Join(strings.Fields(out), " ") == "1 0 ssdcache.io/pool=cache", out, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	for name := range oldUUIDs {
		if out, err := trySh("dmsetup info %s", name); err == nil {
			t.Fatalf("the dead LV's device %s is still there:\n%s", name, out)
		}
	}
	t.Logf("cache dropped, devices removed %v later; log: %s", removed.Sub(dropped).Round(100*time.Millisecond),
		lastLines(grepLines(p.log.String(), "lost cache pool"), 4))

	// A restage attaches a new cache under the same LV names; every byte is there.
	p.unstage(t, v)
	p.stage(t, v)
	if tbl := table(t, v.id); tbl.Target.Type() != "cache" {
		t.Fatalf("after the pool was made again the restaged volume's table is %q, want a cache\n%s", tbl, p.diagnose())
	}
	for name, old := range oldUUIDs {
		if now := strings.TrimSpace(sh(t, "dmsetup info -c --noheadings -o uuid %s", name)); now == old {
			t.Fatalf("%s still has the dead LV's uuid %s", name, old)
		}
	}
	for pass := 1; pass <= 2; pass++ {
		if got := sh(t, "dd if=%s bs=1M iflag=direct status=none | sha256sum", dev); got != want {
			t.Fatalf("read pass %d through the new cache: sha256 %s, want %s", pass, got, want)
		}
	}
	st := cacheStatus(t, v.id)
	t.Logf("new cache on %s: 32 MiB read twice equal to what was written; %d blocks cached, %d read hits, %d misses",
		pvOfCache(t, "--devices "+nodeB, vg, v.id), st.CacheUsed, st.ReadHits, st.ReadMisses)
	removeVolume(t, p, v)
	p.stop()
	sh(t, "vgremove --devices %s -f -y %s && pvremove --devices %s -y %s", nodeB, vg, nodeB, nodeB)
}
