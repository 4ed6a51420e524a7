package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/cache"
)

// The clean-reboot check rides on the power-loss test's two boots. The
// writing boot warms two more cached volumes, stops the plugin with
// SIGTERM (which marks live caches for a clean shutdown), removes the
// device of one of them as a clean shutdown's detach of dm devices does,
// and leaves the other live until the power is cut. The verifying boot
// restages both, the removed one with its cache LVs left inactive as by a
// boot without LVM's autoactivation: it comes back warm, reading at most 5 % of
// what it held from the HDD; the other, marked but never removed, is not
// trusted (safety rule 2); both hold every record written.
const (
	cleanRebootVolume = "cleanreboot"
	markedLiveVolume  = "markedlive"
	rebootRecords     = 4096 // 16 MiB of 4 KiB records
)

func rebootVol(p *plugin, id string) *volume {
	dir := filepath.Join(p.env.work, "kubelet", id)
	return &volume{id: id, context: cached("64Mi"), capability: blockCapability(),
		staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}
}

// cleanRebootHeld keeps how many bytes the removed volume's cache held.
func cleanRebootHeld() string { return filepath.Join(os.Getenv("SSDCACHE_SHARE"), "cleanreboot.held") }

// warmRebootVolumes provisions and stages the two volumes, writes every
// record at version 0 and reads them until the promoter has copied most of
// each volume's records into its cache.
func warmRebootVolumes(t *testing.T, p *plugin) {
	t.Helper()
	ids := []string{cleanRebootVolume, markedLiveVolume}
	for _, id := range ids {
		p.provision(t, id, 256<<20, cached("64Mi"), blockCapability())
		p.stage(t, rebootVol(p, id))
		writeRecords(t, cache.DevicePath(id), rebootRecords)
	}
	warm := func() bool {
		for _, id := range ids {
			if cachedBytes(t, id) < 12<<20 {
				return false
			}
		}
		return true
	}
	for pass := 0; pass < 15 && !warm(); pass++ {
		for _, id := range ids {
			sh(t, "dd if=%s iflag=direct bs=1M count=16 of=/dev/null status=none", cache.DevicePath(id))
		}
		time.Sleep(time.Second)
	}
}

// writeRecords writes records 0 to n-1 at version 0 in 1 MiB writes: one
// O_DIRECT write per record would take a minute at the emulated HDD's speed.
func writeRecords(t *testing.T, dev string, n int) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := alignedBuffer(1 << 20)
	per := len(chunk) / recordSize
	for first := 0; first < n; first += per {
		for j := 0; j < per; j++ {
			fillRecord(chunk[j*recordSize:(j+1)*recordSize], first+j, 0)
		}
		if _, err := f.WriteAt(chunk, int64(first)*recordSize); err != nil {
			t.Fatalf("write records from %d: %v", first, err)
		}
	}
}

// expectRecords checks that records 0 to n-1 all hold version 0, reading
// them in 1 MiB reads.
func expectRecords(t *testing.T, dev string, n int) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := alignedBuffer(1 << 20)
	per := len(chunk) / recordSize
	for first := 0; first < n; first += per {
		if _, err := f.ReadAt(chunk, int64(first)*recordSize); err != nil {
			t.Fatalf("read records from %d: %v", first, err)
		}
		for j := 0; j < per; j++ {
			i, version, ok := parseRecord(chunk[j*recordSize : (j+1)*recordSize])
			if !ok || i != first+j || version != 0 {
				t.Fatalf("%s: record %d reads as record %d version %d (intact: %v), want version 0", dev, first+j, i, version, ok)
			}
		}
	}
}

// shutDownCleanly stops the plugin (SIGTERM), checks which caches it
// marked and removes the first volume's device, as a clean shutdown would.
// The power-loss volume is not marked: saveDistinctHits suspended and
// resumed it, which leaves dm-cache's clean flag set while it serves.
func shutDownCleanly(t *testing.T, p *plugin) {
	t.Helper()
	waitNoPromotion(t, p)
	held := cachedBytes(t, cleanRebootVolume)
	p.stop()
	boot := strings.TrimSpace(sh(t, "cat /proc/sys/kernel/random/boot_id"))
	// A promotion's metadata LV alternates between two names.
	lvs := sh(t, "lvs --noheadings -o lv_name,lv_tags %s", cacheVG)
	for id, want := range map[string]bool{cleanRebootVolume: true, markedLiveVolume: true, powerLossVolume: false} {
		marked := false
		for _, line := range strings.Split(lvs, "\n") {
			f := strings.Fields(line)
			marked = marked || len(f) == 2 && strings.HasPrefix(f[0], id+".") && strings.Contains(f[1], cache.ShutdownTagPrefix+boot)
		}
		if marked != want {
			t.Fatalf("volume %s marked for this boot (%s): %v, want %v; LVs:\n%s\n%s", id, boot, marked, want, lvs, p.log)
		}
	}
	sh(t, "dmsetup remove %s", cache.DeviceName(cleanRebootVolume))
	if err := os.WriteFile(cleanRebootHeld(), []byte(strconv.FormatUint(held, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("plugin stopped; %s's cache held %d KiB and its device was removed", cleanRebootVolume, held>>10)
}

// verifyCleanReboot restages both volumes on the next boot.
func verifyCleanReboot(t *testing.T, p *plugin) {
	t.Helper()
	data, err := os.ReadFile(cleanRebootHeld())
	if err != nil {
		t.Fatal(err)
	}
	held, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil || held < 8<<20 {
		t.Fatalf("the writing boot's cache held %q bytes (%v): too little to judge a warm return", data, err)
	}
	deactivateCacheLVs(t, cleanRebootVolume)
	origin := fmt.Sprintf("/dev/%s/%s", originVG, cleanRebootVolume)
	fromOrigin := stageMeasuringOrigin(t, p, rebootVol(p, cleanRebootVolume), origin)
	if !strings.Contains(p.log.String(), `"Activated the kept cache LVs LVM left inactive at boot" volumeID="`+cleanRebootVolume+`"`) {
		t.Fatalf("%s: the stage did not activate the kept cache LVs this boot left inactive:\n%s", cleanRebootVolume, p.log)
	}
	dev := cache.DevicePath(cleanRebootVolume)
	read0, origin0 := bytesRead(t, dev), bytesRead(t, origin)
	expectRecords(t, dev, rebootRecords)
	pass := passReads{read: bytesRead(t, dev) - read0, fromOrigin: bytesRead(t, origin) - origin0}
	t.Logf("%s after the clean reboot: %d KiB read from the HDD by the stage and attach (the cache held %d KiB); first pass %v",
		cleanRebootVolume, fromOrigin>>10, held>>10, pass)
	if !strings.Contains(p.log.String(), `"The cache was removed cleanly at the last shutdown; it is kept as after a clean unstage" volumeID="`+cleanRebootVolume+`"`) ||
		!strings.Contains(p.log.String(), `"Mapped the kept cache blocks again" volumeID="`+cleanRebootVolume+`" operation="attach" blocks=0 bytes=0`) ||
		fromOrigin > max(held/20, probeAllowance) || pass.fromOrigin*10 > held {
		t.Fatalf("%s: want the kept cache mapped again without copying, at most 5 %% of the %d bytes it held (or udev's probe, %d) read from the HDD, and a warm first pass; read %d, first pass %v\n%s",
			cleanRebootVolume, held, probeAllowance, fromOrigin, pass, p.log)
	}

	p.stage(t, rebootVol(p, markedLiveVolume))
	if !strings.Contains(p.log.String(), `"The cache marked at the last shutdown is not trusted; it is filled as after a crash" volumeID="`+markedLiveVolume+`"`) {
		t.Fatalf("%s was marked and never removed, yet its cache was not refused after the power loss:\n%s", markedLiveVolume, p.log)
	}
	expectRecords(t, cache.DevicePath(markedLiveVolume), rebootRecords)
}

// deactivateCacheLVs leaves id's cache LVs inactive, as a boot without
// LVM's autoactivation (auto_activation_volume_list) does.
func deactivateCacheLVs(t *testing.T, id string) {
	t.Helper()
	for _, name := range strings.Fields(sh(t, "lvs --noheadings -o lv_name %s", cacheVG)) {
		if strings.HasPrefix(name, id+".") {
			sh(t, "lvchange -an %s/%s", cacheVG, name)
		}
	}
}

// probeAllowance is what udev's probe of a newly staged device reads from
// the origin whatever the cache holds (2 MiB measured in this test): the
// stage creates the device linear, the cache is attached after. With this
// test's small hot set it exceeds 5 % of it; a copy of the hot set does not
// fit in it.
const probeAllowance = 4 << 20

// stageMeasuringOrigin stages v (its cache attached with it) and returns
// the bytes the origin read meanwhile, udev's probe of the new device
// included: holding udev's queue would hold the stage too, which waits for
// udev to create the device's node.
func stageMeasuringOrigin(t *testing.T, p *plugin, v *volume, origin string) uint64 {
	t.Helper()
	sh(t, "udevadm settle")
	read0 := bytesRead(t, origin)
	p.stage(t, v)
	sh(t, "udevadm settle")
	return bytesRead(t, origin) - read0
}
