package guest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

// TestMissedReadsAreTheBlocksTheCacheSentToTheOrigin: the promoter's miss
// tracker (pkg/readtrack) on a real dm-cache records exactly the origin
// blocks of reads the cache sent to its origin: one block per scattered
// 4 KiB read, wherever it falls, nothing for writes, and nothing for reads
// of the origin itself (a warm-up's or a promotion's copy).
func TestMissedReadsAreTheBlocksTheCacheSentToTheOrigin(t *testing.T) {
	guestEnv(t)
	loops := loopDevices(t, t.TempDir(), map[string]int{"meta": 8, "data": 16, "origin": 256})
	const name, blockSectors = "readtrack-cache", 512
	sh(t, "dd if=/dev/zero of=%s bs=1M count=1 status=none", loops["meta"])
	// The cleaner promotes nothing: every read of the origin misses.
	sh(t, "dmsetup create %s --table '0 %d cache %s %s %s %d 1 writethrough cleaner 0'", name, 256<<11, loops["meta"], loops["data"], loops["origin"], blockSectors)
	t.Cleanup(func() { _, _ = trySh("dmsetup remove %s", name) })
	// udev's probe of the new device reads its first and last blocks: let it
	// finish before counting.
	sh(t, "udevadm settle")
	device, origin := devNum(t, dm.DevicePath(name)), devNum(t, loops["origin"])

	tracker := readtrack.NewKernel()
	t.Cleanup(tracker.Close)
	if err := tracker.Track(ctx(t), name, readtrack.Volume{Device: device, Origin: origin, BlockSectors: blockSectors}); err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := uint64(0); i < 64; i++ { // one 4 KiB read in each 4 MiB of the origin, 12 KiB into it
		sh(t, "dd if=%s of=/dev/null bs=4k skip=%d count=1 iflag=direct status=none", dm.DevicePath(name), i*1024+3)
		want = append(want, (i*1024+3)*8/blockSectors)
	}
	// Block 410 is written, blocks 801-815 read from the origin itself.
	sh(t, "dd if=/dev/zero of=%s bs=4k seek=%d count=8 oflag=direct status=none", dm.DevicePath(name), 410*blockSectors/8)
	sh(t, "dd if=%s of=/dev/null bs=1M skip=200 count=4 iflag=direct status=none", loops["origin"])
	sh(t, "udevadm settle")
	blocks, err := tracker.Take(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	// Closing the device after the write makes udev probe it again
	// (blkid reads its first and last blocks): real misses, allowed there.
	probed := func(b uint64) bool { return b < 16 || b >= 1008 }
	for _, b := range want {
		if !slices.Contains(blocks, b) {
			t.Fatalf("block %d was read and missed but not recorded; recorded %v", b, blocks)
		}
	}
	for _, b := range blocks {
		if !slices.Contains(want, b) && !probed(b) {
			t.Fatalf("block %d was recorded, but no read of it missed (410 was written, 801-815 read from the origin); recorded %v", b, blocks)
		}
	}
	if again, err := tracker.Take(ctx(t), name); err != nil || len(again) != 0 {
		t.Fatalf("blocks missed after taking them: %v (%v), want none", again, err)
	}
	if err := tracker.Untrack(ctx(t), name); err != nil {
		t.Fatal(err)
	}
	if _, err := tracker.Take(ctx(t), name); err != readtrack.ErrNotTracked {
		t.Fatalf("Take after Untrack: %v, want ErrNotTracked", err)
	}
}

func devNum(t *testing.T, path string) dm.DevNum {
	t.Helper()
	d, err := dm.ParseDevNum(strings.TrimSpace(sh(t, "lsblk -ndo MAJ:MIN %s", path)))
	if err != nil {
		t.Fatal(fmt.Errorf("device number of %s: %w", path, err))
	}
	return d
}
