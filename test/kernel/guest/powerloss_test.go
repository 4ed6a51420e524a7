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
	// A promotion swaps the cache out for a second or two; the status to
	// compare after the cut is the cache's.
	var before string
	if err := poll("the cache table, between promotions", 100*time.Millisecond, func() (bool, string, error) {
		before = sh(t, "dmsetup status --noflush %s", cache.DeviceName(v.id))
		_, err := dm.ParseCacheStatus(before)
		return err == nil, before, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
	t.Logf("cache before the overwrite: %s", before)
	logPromotions(t, p)
	if err := os.WriteFile(powerLossStatus(), []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
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
	binary.LittleEndian.PutUint64(buf[0:], uint64(i))
	binary.LittleEndian.PutUint64(buf[8:], uint64(version))
	for j := 48; j < recordSize; j++ {
		buf[j] = byte(i + version + j)
	}
	sum := sha256.Sum256(buf[48:])
	copy(buf[16:48], sum[:])
	if _, err := f.WriteAt(buf, int64(i)*recordSize); err != nil {
		t.Fatalf("write record %d: %v", i, err)
	}
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
	sum := sha256.Sum256(buf[48:])
	if idx := binary.LittleEndian.Uint64(buf[0:]); idx != uint64(i) || !bytes.Equal(sum[:], buf[16:48]) {
		t.Fatalf("record %d is torn or misplaced (index %d)", i, idx)
	}
	return int(binary.LittleEndian.Uint64(buf[8:]))
}

// alignedBlock returns a record buffer aligned for O_DIRECT.
func alignedBlock() []byte {
	raw := make([]byte, 2*recordSize)
	off := (recordSize - int(uintptr(unsafe.Pointer(&raw[0]))%recordSize)) % recordSize
	return raw[off : off+recordSize]
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

// expectFreshCache checks that restaging started the cache from zeroed
// metadata: the plan zeroed it, and no block is dirty, as every block of
// metadata left by a crash would be. dm-cache's read counters are not
// compared with their value before the cut: the warm-up maps the hot set at
// attach and udev's probe of the new device reads it, so they may pass that
// value within a second, and a promotion after the sample restarts them.
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
	if after.Dirty != 0 {
		t.Fatalf("restaged cache carries the old metadata (stale metadata was trusted): before %+v, after %+v", before, after)
	}
	if !strings.Contains(p.log.String(), "zero-metadata") {
		t.Fatalf("the plugin did not zero the metadata when restaging:\n%s", p.log)
	}
}
