package guest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

// TestPausedUnderConcurrentWrites: Paused once reloaded a live cache in
// dm-cache's passthrough mode, whose write path the kernel fixed only in 2026
// (cache target 2.4.0: the origin write was issued before the invalidation
// was committed; concurrent writes to one cached block could crash). Now it
// swaps in a linear table and keeps the cache LVs; resuming maps the kept
// blocks again but for those written meanwhile. Blocks are promoted, the cache
// paused, four fio jobs write overlapping 4 KiB ranges of them, and after
// resuming (and after detaching) every byte read equals what the paused
// device read: the origin's, although the resumed cache holds those blocks.
func TestPausedUnderConcurrentWrites(t *testing.T) {
	e := guestEnv(t)
	// The test changes the cache with an engine of its own, whose locks the
	// plugin does not share: the plugin must not promote on the volume meanwhile.
	p := startPlugin(t, e, "--promote-interval=0")
	v := p.provision(t, "paused", 256<<20, nil, blockCapability())
	p.stage(t, v)
	dev := cache.DevicePath(v.id)
	eng := realEngine(cache.NoFaults{})
	set := func(spec *cache.Spec) {
		t.Helper()
		if _, err := eng.SetCache(ctx(t), v.id, spec); err != nil {
			t.Fatal(err)
		}
	}
	set(&cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache})
	sh(t, "dd if=/dev/urandom of=%s bs=1M count=16 oflag=direct status=none", dev)
	promoted := func() uint64 { return cacheStatus(t, v.id).Promotions }
	for pass := 0; promoted() == 0; pass++ {
		if pass == 30 {
			t.Fatalf("no block promoted after %d passes over 16 MiB", pass)
		}
		sh(t, "dd if=%s of=/dev/null bs=64k count=256 iflag=direct status=none", dev)
		time.Sleep(time.Second)
	}
	t.Logf("promoted blocks before the pause: %d; kernel %s, dm-cache target %s", promoted(),
		sh(t, "uname -r"), sh(t, "dmsetup targets | awk '$1 == \"cache\" {print $2}'"))

	set(&cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModePaused})
	expectPaused(t, v.id)
	sh(t, "fio --name=paused --filename=%s --size=16M --rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=8 "+
		"--numjobs=4 --time_based --runtime=5 --randrepeat=0 --group_reporting >/dev/null", dev)
	checksum := func() string {
		return strings.Fields(sh(t, "dd if=%s bs=1M count=16 iflag=direct status=none | sha256sum", dev))[0]
	}
	want := checksum()

	res, err := eng.SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache, Warm: true})
	if err != nil {
		t.Fatal(err)
	}
	expectCacheMode(t, v.id, dm.Writethrough)
	t.Logf("resumed: %d blocks kept, %d written while paused left out, in %v", res.Warmed.Kept, res.Warmed.Dropped, res.Warmed.Duration)
	if res.Warmed.Kept+res.Warmed.Dropped == 0 {
		t.Fatal("resuming neither kept nor left out any block of the paused cache")
	}
	if got := checksum(); got != want {
		t.Fatalf("after resuming, the cache serves data the paused writes replaced: %s, want %s", got, want)
	}
	set(nil)
	if got := checksum(); got != want {
		t.Fatalf("the origin lost paused writes: %s, want %s", got, want)
	}
	p.unstage(t, v)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), deleteRequest(v)); err != nil {
		t.Fatalf("DeleteVolume %s: %v", v.id, err)
	}
}

// TestPauseResumesWarmWithoutTheHDD: a cache filled with 16 MiB is paused,
// four 4 KiB writes land in four of its blocks (of 256 KiB) through the paused (linear)
// device, and a new engine, as after a plugin restart, resumes it: every
// block but the four written is mapped again while at most 5 % of the hot
// set is read from the origin, the first pass after the resume hits, and
// every byte equals the origin's.
func TestPauseResumesWarmWithoutTheHDD(t *testing.T) {
	_, v, dev := ownEngineVolume(t, "pausewarm", 256<<20)
	const hotBytes = 16 << 20 // the first 16 MiB, in 64 KiB runs
	hot := make([]uint64, hotBytes/(64<<10))
	for i := range hot {
		hot[i] = uint64(i)
	}
	if err := hotset.InStateDir(stateDir()).Save(v.id, hotset.FromBlocks(hot, (64<<10)/dm.SectorSize)); err != nil {
		t.Fatal(err)
	}
	spec := cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache, Warm: true}
	res, err := realEngine(cache.NoFaults{}).SetCache(ctx(t), v.id, &spec)
	if err != nil || res.Warmed.Bytes != hotBytes {
		t.Fatalf("filling the cache from a hot set of %d bytes: %+v, %v", hotBytes, res.Warmed, err)
	}
	filled := res.Warmed.Blocks // smq may add blocks of udev's probe until the pause
	paused := spec
	paused.Mode = cache.ModePaused
	sh(t, "udevadm settle")
	mapped := cacheStatus(t, v.id).CacheUsed
	if _, err := realEngine(cache.NoFaults{}).SetCache(ctx(t), v.id, &paused); err != nil {
		t.Fatal(err)
	}
	expectPaused(t, v.id)
	for _, mib := range []int{1, 5, 9, 13} {
		sh(t, "dd if=/dev/urandom of=%s bs=4k count=1 seek=%d oflag=direct conv=notrunc status=none", dev, mib*256)
	}

	// udev probes the device after each table change, through the cache:
	// the application's reads, not the resume's, held until it is measured.
	origin := fmt.Sprintf("/dev/%s/%s", originVG, v.id)
	sh(t, "udevadm settle && udevadm control --stop-exec-queue")
	t.Cleanup(func() { _, _ = trySh("udevadm control --start-exec-queue") })
	read0 := bytesRead(t, origin)
	res, err = realEngine(cache.NoFaults{}).SetCache(ctx(t), v.id, &spec)
	fromOrigin := bytesRead(t, origin) - read0
	sh(t, "udevadm control --start-exec-queue")
	if err != nil {
		t.Fatal(err)
	}
	expectCacheMode(t, v.id, dm.Writethrough)
	w := res.Warmed
	t.Logf("resumed: %d of about %d blocks kept, %d written while paused left out, %d copied; %d KiB read from the origin meanwhile; %v",
		w.Kept, mapped, w.Dropped, w.Blocks, fromOrigin>>10, w.Duration)
	if w.Kept+w.Dropped < filled || w.Dropped < 4 || w.Blocks != 0 || fromOrigin*20 > hotBytes {
		t.Fatalf("resume: %+v after %d blocks filled, %d bytes read from the origin; want the 4 written blocks left out, "+
			"the rest kept, nothing copied and at most 5 %% of the hot set read from the origin", w, filled, fromOrigin)
	}

	read0, origin0 := bytesRead(t, dev), bytesRead(t, origin)
	got := strings.Fields(sh(t, "dd if=%s bs=1M count=16 iflag=direct status=none | sha256sum", dev))[0]
	r := passReads{read: bytesRead(t, dev) - read0, fromOrigin: bytesRead(t, origin) - origin0}
	want := strings.Fields(sh(t, "dd if=%s bs=1M count=16 iflag=direct status=none | sha256sum", origin))[0]
	t.Logf("first pass after the resume: %v", r)
	if got != want {
		t.Fatalf("the resumed cache serves %s over the hot set, the origin holds %s", got, want)
	}
	if r.hitRatio() < 0.9 {
		t.Fatalf("first pass after the resume: %v; want a hit ratio of at least 0.9", r)
	}
}
