package guest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// The power-loss test spans two boots, driven by the host (package kernel):
// TestPowerLossWrite warms a cache and then overwrites its blocks, logging
// every acknowledged write to the shared dir, until the host cuts the VM's
// power; TestPowerLossVerify, on the next boot, restages the volume and
// checks that the stale cache metadata was discarded (safety rule 2) and
// that every acknowledged write is on the volume.
const (
	powerLossVolume  = "powerloss"
	powerLossRecords = 4096 // 4 KiB records over the first 16 MiB
	recordSize       = 4096
)

func powerLossLog() string { return filepath.Join(os.Getenv("SSDCACHE_SHARE"), "powerloss.acked") }

// powerLossStatus keeps the cache's status line from before the power cut.
func powerLossStatus() string { return filepath.Join(os.Getenv("SSDCACHE_SHARE"), "powerloss.status") }

func powerLossVol(p *plugin) *volume {
	dir := filepath.Join(p.env.work, "kubelet", powerLossVolume)
	return &volume{id: powerLossVolume, context: cached("64Mi"), capability: blockCapability(),
		staging: filepath.Join(dir, "staging"), target: filepath.Join(dir, "target")}
}

func TestPowerLossWrite(t *testing.T) {
	e := guestEnv(t)
	if os.Getenv("SSDCACHE_POWERLOSS") != "write" {
		t.Skip("first half of the host-driven power-loss test")
	}
	p := startPlugin(t, e)
	p.provision(t, powerLossVolume, 256<<20, cached("64Mi"), blockCapability())
	v := powerLossVol(p)
	p.stage(t, v)
	dev := cache.DevicePath(v.id)
	// Version 0 of every record, then read until dm-cache holds blocks of it.
	for i := 0; i < powerLossRecords; i++ {
		writeRecord(t, dev, i, 0, false)
	}
	for pass := 0; pass < 15 && cachedBytes(t, v.id) < 4<<20; pass++ {
		sh(t, "dd if=%s iflag=direct bs=1M count=16 of=/dev/null status=none", dev)
		time.Sleep(time.Second)
	}
	warmRebootVolumes(t, p)
	before := saveDistinctHits(t, p, v.id)
	t.Logf("cache before the overwrite: %s", before)
	logPromotions(t, p)
	if err := os.WriteFile(powerLossStatus(), []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	shutDownCleanly(t, p)
	log, err := os.OpenFile(powerLossLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	for version := 1; ; version++ {
		for i := 0; i < powerLossRecords; i++ {
			writeRecord(t, dev, i, version, true)
			fmt.Fprintf(log, "%d %d\n", i, version)
			if err := log.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestPowerLossVerify(t *testing.T) {
	e := guestEnv(t)
	if os.Getenv("SSDCACHE_POWERLOSS") != "verify" {
		t.Skip("second half of the host-driven power-loss test")
	}
	acked := readAcked(t)
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged before the power loss")
	}
	p := startPlugin(t, e)
	v := powerLossVol(p)
	p.stage(t, v)
	expectFreshCache(t, p, v.id)
	dev := cache.DevicePath(v.id)
	for i, version := range acked {
		got := readRecord(t, dev, i)
		if got < version {
			t.Fatalf("record %d holds version %d, but version %d was acknowledged before the power loss", i, got, version)
		}
	}
	t.Logf("%d records verified; the last acknowledged write was version %d", len(acked), maxVersion(acked))
	p.unstage(t, v)
	verifyCleanReboot(t, p)
}

// writeRecord writes record i as version with O_DIRECT (and O_DSYNC when
// durable), so that it is acknowledged only once on the device.
func writeRecord(t testing.TB, dev string, i, version int, durable bool) {
	flags := os.O_WRONLY | unix.O_DIRECT
	if durable {
		flags |= unix.O_DSYNC
	}
	f, err := os.OpenFile(dev, flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBlock()
	fillRecord(buf, i, version)
	if _, err := f.WriteAt(buf, int64(i)*recordSize); err != nil {
		t.Fatalf("write record %d: %v", i, err)
	}
}

// fillRecord lays record i at version into buf: its index, its version, a
// checksum and a pattern of both.
func fillRecord(buf []byte, i, version int) {
	binary.LittleEndian.PutUint64(buf[0:], uint64(i))
	binary.LittleEndian.PutUint64(buf[8:], uint64(version))
	for j := 48; j < recordSize; j++ {
		buf[j] = byte(i + version + j)
	}
	sum := sha256.Sum256(buf[48:recordSize])
	copy(buf[16:48], sum[:])
}

// parseRecord returns the index and version a record holds, and whether
// its checksum matches.
func parseRecord(buf []byte) (i, version int, ok bool) {
	sum := sha256.Sum256(buf[48:recordSize])
	return int(binary.LittleEndian.Uint64(buf[0:])), int(binary.LittleEndian.Uint64(buf[8:])), bytes.Equal(sum[:], buf[16:48])
}

// readRecord returns the version of record i after checking its checksum.
func readRecord(t testing.TB, dev string, i int) int {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := alignedBlock()
	if _, err := f.ReadAt(buf, int64(i)*recordSize); err != nil {
		t.Fatalf("read record %d: %v", i, err)
	}
	idx, version, ok := parseRecord(buf)
	if idx != i || !ok {
		t.Fatalf("record %d is torn or misplaced (index %d)", i, idx)
	}
	return version
}

// alignedBlock returns a record buffer aligned for O_DIRECT.
func alignedBlock() []byte { return alignedBuffer(recordSize) }

// alignedBuffer returns n bytes aligned to a record, for O_DIRECT.
func alignedBuffer(n int) []byte {
	raw := make([]byte, n+recordSize)
	off := (recordSize - int(uintptr(unsafe.Pointer(&raw[0]))%recordSize)) % recordSize
	return raw[off : off+n]
}

func readAcked(t testing.TB) map[int]int {
	f, err := os.Open(powerLossLog())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	acked := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue // the line being written when the power went
		}
		i, err1 := strconv.Atoi(fields[0])
		v, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil && v > acked[i] {
			acked[i] = v
		}
	}
	return acked
}

func maxVersion(m map[int]int) int {
	top := 0
	for _, v := range m {
		top = max(top, v)
	}
	return top
}

// powerLossSavedHits is the read-hit count the writing boot saves in the
// cache's metadata before the cut: far more than a cache restaged from
// zeroed metadata counts before the check (its warm-up copies from the
// origin without reading the cache; udev's probe reads a few blocks).
const powerLossSavedHits = 20000

// saveDistinctHits reads cached blocks until the cache counts at least
// powerLossSavedHits read hits, then suspends and resumes the device:
// dm-cache writes its counters into the metadata superblock at every
// commit and loads them back with the metadata, so a cache restaged over
// this metadata would start from at least that count. The promoter must be
// idle: one of its promotions writes fresh metadata, counters at zero. It
// returns the cache's status after the commit.
func saveDistinctHits(t *testing.T, p *plugin, id string) string {
	t.Helper()
	name, dev := cache.DeviceName(id), cache.DevicePath(id)
	hits := func() uint64 {
		// A promotion swaps the cache out for a second or two.
		var st dm.CacheStatus
		if err := poll("the cache table, between promotions", 100*time.Millisecond, func() (bool, string, error) {
			line := sh(t, "dmsetup status --noflush %s", name)
			var err error
			st, err = dm.ParseCacheStatus(line)
			return err == nil, line, nil
		}); err != nil {
			t.Fatalf("%v\n%s", err, p.diagnose())
		}
		return st.ReadHits
	}
	// A promotion ending meanwhile restarts the count: read again.
	for try := 0; try < 64 && hits() < powerLossSavedHits; try++ {
		sh(t, "dd if=%s iflag=direct bs=4k count=4096 of=/dev/null status=none", dev)
		if hits() >= powerLossSavedHits {
			waitNoPromotion(t, p)
		}
	}
	sh(t, "dmsetup suspend %s && dmsetup resume %s", name, name)
	status := sh(t, "dmsetup status --noflush %s", name)
	if st, err := dm.ParseCacheStatus(status); err != nil || st.ReadHits < powerLossSavedHits {
		t.Fatalf("cache status %q (%v): want at least %d read hits saved before the cut\n%s", status, err, powerLossSavedHits, p.diagnose())
	}
	return status
}

// expectFreshCache checks that restaging started the cache from zeroed
// metadata. A cache loaded over the metadata left by the crash would start
// counting read hits from the powerLossSavedHits or more that the writing
// boot saved in it, and mark its blocks dirty; one restaged from zeroed
// metadata starts from zero, and its warm-up maps the hot set with
// cache_restore's fresh counters. Call it before reading the volume.
func expectFreshCache(t *testing.T, p *plugin, id string) {
	t.Helper()
	data, err := os.ReadFile(powerLossStatus())
	if err != nil {
		t.Fatal(err)
	}
	before, err := dm.ParseCacheStatus(string(data))
	if err != nil {
		t.Fatal(err)
	}
	after, err := dm.ParseCacheStatus(sh(t, "dmsetup status --noflush %s", cache.DeviceName(id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache before the cut: %d used, %d read hits; after restaging: %d used, %d read hits, %d dirty",
		before.CacheUsed, before.ReadHits, after.CacheUsed, after.ReadHits, after.Dirty)
	if before.ReadHits < powerLossSavedHits {
		t.Fatalf("the writing boot saved %d read hits, want at least %d: the check cannot tell fresh metadata from the old", before.ReadHits, powerLossSavedHits)
	}
	if after.ReadHits >= powerLossSavedHits/2 || after.Dirty != 0 {
		t.Fatalf("restaged cache carries the old metadata (stale metadata was trusted): before %+v, after %+v", before, after)
	}
	if !strings.Contains(p.log.String(), "zero-metadata") {
		t.Fatalf("the plugin did not zero the metadata when restaging:\n%s", p.log)
	}
}

// waitNoPromotion waits until every promotion the plugin started has ended
// and none started for three promote intervals.
func waitNoPromotion(t *testing.T, p *plugin) {
	t.Helper()
	last, since := -1, time.Now()
	err := poll("no promotion running", agent.DefaultPromoteInterval, func() (bool, string, error) {
		log := p.log.String()
		started, ended := strings.Count(log, `"Promoting the blocks read"`), len(promotedLine.FindAllStringSubmatch(log, -1))
		if started != last {
			last, since = started, time.Now()
		}
		quiet := time.Since(since)
		return started == ended && quiet >= 3*agent.DefaultPromoteInterval, fmt.Sprintf("%d promotions started, %d ended, none started for %v", started, ended, quiet), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
}
