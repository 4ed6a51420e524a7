package guest

import (
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestPausedUnderConcurrentWrites: Paused once reloaded a live cache in
// dm-cache's passthrough mode, whose write path the kernel fixed only in 2026
// (cache target 2.4.0: the origin write was issued before the invalidation
// was committed; concurrent writes to one cached block could crash). Now it
// swaps in a linear table and keeps the cache LVs; resuming fills a new cache
// from the hot set, copied from the origin. Blocks are promoted, the cache
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
	t.Logf("resumed: %d blocks filled from the hot set in %v", res.Warmed.Blocks, res.Warmed.Duration)
	if res.Warmed.Blocks == 0 {
		t.Fatal("resuming filled nothing from the hot set of the paused cache")
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
