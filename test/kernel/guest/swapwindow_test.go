package guest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// TestSwapWindowAtCacheSizes measures what a promotion's metadata swap
// holds a volume's I/O for, at cache sizes the kernel suite's 1 GiB SSD
// cannot hold: the same calls as the node plugin (ioctls on the control
// device, metadata2, cleaner), on sparse loop devices in the guest's
// tmpfs, half of each cache mapped. The cache table over the second
// metadata is loaded first, as loadOverNext does; the device is then
// suspended and resumed onto it. It logs the median of three swaps per
// size and judges nothing (timings belong in benchmarks): it is how
// README's figure of dm-cache's own suspend and resume at 4,096 to 262,144
// cache blocks is made, and runs only when named:
//
//	SSDCACHE_VM=1 SSDCACHE_GUEST_RUN='^TestSwapWindowAtCacheSizes$' go test -count=1 -timeout 40m -v -run '^TestKernel$' ./test/kernel/
func TestSwapWindowAtCacheSizes(t *testing.T) {
	e := guestEnv(t)
	const blockSectors = 512 // 256 KiB, the plugin's default
	run := command.NewRunner(exec.New())
	kernel := dm.NewDmsetup(run).ReadingFrom(dm.NewControlDevice())
	tools := dm.NewCacheTools(run, filepath.Join(e.work, "swapwindow-tmp"))
	for _, cacheBlocks := range []uint64{4096, 65536, 262144} {
		loops := loopDevices(t, filepath.Join(e.work, fmt.Sprintf("swapwindow-%d", cacheBlocks)), map[string]int{
			"meta1": 64, "meta2": 64, "data": int(cacheBlocks * blockSectors * dm.SectorSize >> 20), "origin": 4 << 20, // a 4 TiB volume
		})
		md := dm.CacheMetadata{BlockSectors: blockSectors, CacheBlocks: cacheBlocks, Policy: "cleaner"}
		for c := range cacheBlocks / 2 {
			md.Mappings = append(md.Mappings, dm.Mapping{Cache: c, Origin: c * 7}) // spread over the volume
		}
		tables := [2]dm.Table{}
		for i, meta := range []string{loops["meta1"], loops["meta2"]} {
			if err := tools.Restore(ctx(t), meta, md); err != nil {
				t.Fatal(err)
			}
			tables[i] = swapWindowTable(t, meta, loops["data"], loops["origin"], blockSectors)
		}
		name := fmt.Sprintf("swapwindow-%d", cacheBlocks)
		if err := kernel.Create(ctx(t), name, tables[0]); err != nil {
			t.Fatal(err)
		}
		sh(t, "udevadm settle")
		// The write count of a promotion's copy, as fine as the engine makes
		// it on this VM's CPUs, read once while suspended.
		areas := dm.TrackedAreasFor(runtime.NumCPU())
		region, err := kernel.TrackWrites(ctx(t), name, (tables[0].Length+areas-1)/areas)
		if err != nil {
			t.Fatal(err)
		}
		// A batch's copies: a sixteenth of the cache (cache.BatchBytes, at
		// least 1 GiB), from the volume's start.
		areaSectors := (tables[0].Length + areas - 1) / areas
		batchSectors := max(cacheBlocks*blockSectors/16, 1<<30/dm.SectorSize)
		var batchAreas []uint64
		for a := range (batchSectors + areaSectors - 1) / areaSectors {
			batchAreas = append(batchAreas, a)
		}
		var loads, suspends, reads, resumes, wholeReads []time.Duration
		for round := range 3 {
			next := tables[(round+1)%2]
			l, s, w, r := timedSwap(t, kernel, name, next, region, batchAreas)
			loads, suspends, reads, resumes = append(loads, l), append(suspends, s), append(reads, w), append(resumes, r)
			start := time.Now()
			if _, err := kernel.WrittenAreas(ctx(t), name, region); err != nil {
				t.Fatal(err)
			}
			wholeReads = append(wholeReads, time.Since(start))
		}
		sh(t, "udevadm settle && dmsetup remove --retry %s", name)
		t.Logf("%d cache blocks (%d GiB), %d mapped: load before the suspend %v; suspend %v, read of the batch's %d of %d write-count areas %v (all %d: %v), resume onto the new metadata %v; the volume waited %v (medians of 3)",
			cacheBlocks, cacheBlocks*blockSectors*dm.SectorSize>>30, len(md.Mappings), median(loads), median(suspends), len(batchAreas), areas, median(reads),
			areas, median(wholeReads), median(resumes), median(suspends)+median(reads)+median(resumes))
	}
}

// swapWindowTable is the plugin's cache table while it fills (cacheTable
// with PolicyFilling) over the loop devices given by path.
func swapWindowTable(t *testing.T, meta, data, origin string, blockSectors uint64) dm.Table {
	t.Helper()
	devNum := func(path string) dm.DevNum {
		n, err := dm.ParseDevNum(sh(t, "lsblk -dno MAJ:MIN %s | tr -d ' '", path))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	sectors := func(path string) uint64 {
		var n uint64
		if _, err := fmt.Sscan(sh(t, "blockdev --getsz %s", path), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	return dm.Table{Length: sectors(origin), Target: dm.CacheTarget{Metadata: devNum(meta), Data: devNum(data), Origin: devNum(origin),
		BlockSectors: blockSectors, Mode: dm.Writethrough, Policy: "cleaner", ExtraFeatures: []string{"metadata2"}}}
}

// timedSwap loads next into name's inactive slot, suspends name, reads
// which of batchAreas of region were written, and resumes name onto next,
// as loadOverNext does, and returns how long each of the four took.
func timedSwap(t *testing.T, kernel *dm.Dmsetup, name string, next dm.Table, region uint64, batchAreas []uint64) (load, suspend, read, resume time.Duration) {
	t.Helper()
	start := time.Now()
	if err := kernel.Load(ctx(t), name, next); err != nil {
		t.Fatal(err)
	}
	suspending := time.Now()
	if err := kernel.Suspend(ctx(t), name); err != nil {
		t.Fatal(err)
	}
	reading := time.Now()
	if _, err := kernel.WrittenAreasAmong(ctx(t), name, region, batchAreas); err != nil {
		t.Fatal(err)
	}
	resuming := time.Now()
	if err := kernel.Resume(ctx(t), name); err != nil {
		t.Fatal(err)
	}
	return suspending.Sub(start), reading.Sub(suspending), resuming.Sub(reading), time.Since(resuming)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2].Round(time.Millisecond)
}
