package guest

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"golang.org/x/sys/unix"
)

// cacheStatus is a cached volume's dm-cache status. A promotion of the
// blocks read swaps the cache out for a linear table for a few seconds; the
// status is read once the cache is back.
func cacheStatus(t testing.TB, id string) dm.CacheStatus {
	t.Helper()
	var st dm.CacheStatus
	err := poll("a cache table on "+id, 100*time.Millisecond, func() (bool, string, error) {
		line := sh(t, "dmsetup status --noflush %s", cache.DeviceName(id))
		var err error
		st, err = dm.ParseCacheStatus(line)
		return err == nil, line, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// passReads is what one pass over a data set read: the bytes read through
// the volume's device, and the bytes read from its origin meanwhile
// (misses, and the copies of any promotion). dm-cache's own hit and miss
// counters start again with every table load, which a promotion during the
// pass makes; the block devices' counters do not.
type passReads struct{ read, fromOrigin uint64 }

// hitRatio is the share of the pass's bytes that did not come from the origin.
func (p passReads) hitRatio() float64 {
	if p.read == 0 || p.fromOrigin >= p.read {
		return 0
	}
	return 1 - float64(p.fromOrigin)/float64(p.read)
}

func (p passReads) String() string {
	return fmt.Sprintf("%d MiB read, %d MiB of it from the origin (hit ratio %.2f)", p.read>>20, p.fromOrigin>>20, p.hitRatio())
}

// readPass reads every file of sums once with O_DIRECT.
func readPass(t testing.TB, id string, sums map[string]string) passReads {
	t.Helper()
	dev, origin := cache.DevicePath(id), fmt.Sprintf("/dev/%s/%s", originVG, id)
	read0, origin0 := bytesRead(t, dev), bytesRead(t, origin)
	verify(t, sums)
	return passReads{read: bytesRead(t, dev) - read0, fromOrigin: bytesRead(t, origin) - origin0}
}

// bytesRead is what the block device at path has read since it appeared.
func bytesRead(t testing.TB, path string) uint64 {
	t.Helper()
	return sectorsStat(t, path, 2) * dm.SectorSize
}

// bytesWritten is what the block device at path has written since it appeared.
func bytesWritten(t testing.TB, path string) uint64 {
	t.Helper()
	return sectorsStat(t, path, 6) * dm.SectorSize
}

// sectorsStat is field i (from 0) of the block device's sysfs stat: 2 is
// sectors read, 6 sectors written.
func sectorsStat(t testing.TB, path string, i int) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data))
	if len(f) <= i {
		t.Fatalf("stat of %s: %q", path, data)
	}
	sectors, err := strconv.ParseUint(f[i], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return sectors
}

// TestWarmRestage: new data, half the cache in size, on a cached ext4
// volume. Pass 1 reads it from the HDD while the plugin's promoter copies
// the blocks read into the cache in batches; pass 2, once the promoter has
// caught up (the time between passes is the test's, not the kernel's),
// reads from the cache, where smq alone needs four to six passes. Then the
// volume is unstaged (its cache LVs kept, its hot set saved) and staged
// again: the cache comes back with those blocks mapped before the first
// read, none of them copied from the HDD, and the first pass hits as the
// last one before did.
func TestWarmRestage(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "warm", 256<<20, cached("128Mi"), fsCapability("ext4"))
	p.stage(t, v)
	p.publish(t, v)
	expectCacheMode(t, v.id, dm.Writethrough)
	sums := dataset(t, v.target, 64)
	blockBytes := cacheStatus(t, v.id).BlockSectors * dm.SectorSize
	t.Logf("cold pass 1: %v", readPass(t, v.id, sums))
	waitPromoterIdle(t, p)
	logPromotions(t, p)
	r := readPass(t, v.id, sums)
	used := cacheStatus(t, v.id).CacheUsed
	t.Logf("cold pass 2: %v; %d blocks cached", r, used)
	if r.hitRatio() < 0.9 {
		t.Fatalf("cold pass 2: %v; want a hit ratio of at least 0.9\n%s", r, p.diagnose())
	}

	p.teardownKeep(t, v)
	set, ok, err := hotset.InStateDir(stateDir()).Load(v.id)
	if err != nil || !ok || set.Sectors()*dm.SectorSize < used*blockBytes {
		t.Fatalf("hot set after unstage: %d sectors (%v, %v), want at least the %d cached blocks of %d bytes", set.Sectors(), ok, err, used, blockBytes)
	}
	origin := fmt.Sprintf("/dev/%s/%s", originVG, v.id)
	read0 := bytesRead(t, origin)
	p.stage(t, v)
	p.publish(t, v)
	restaged := cacheStatus(t, v.id)
	warmRead := bytesRead(t, origin) - read0
	if restaged.CacheUsed+4 < used { // ext4's mount writes a few blocks before the attach; those stay out
		t.Fatalf("after restage the cache maps %d blocks, want the %d it held at the unstage\n%s", restaged.CacheUsed, used, p.diagnose())
	}
	// The attach maps the kept blocks and copies none: the origin's reads
	// are those of udev's probe and the mount (ext4's metadata, which the
	// passes over file data did not promote), a figure.
	kept := keptLine.FindAllStringSubmatch(p.log.String(), -1)
	if len(kept) == 0 {
		t.Fatalf("the restage mapped no kept block again:\n%s", p.diagnose())
	}
	t.Logf("restage: %s of %d blocks mapped again, %s copied from the origin; %d KiB read from the origin by udev, the mount and the attach",
		kept[len(kept)-1][2], used, kept[len(kept)-1][1], warmRead>>10)
	if kept[len(kept)-1][1] != "0" {
		t.Fatalf("the restage's attach copied %s blocks from the origin, want none: the cache kept them", kept[len(kept)-1][1])
	}
	r = readPass(t, v.id, sums)
	t.Logf("first pass after restage: %v; %d of %d blocks mapped before it", r, restaged.CacheUsed, used)
	if r.hitRatio() < 0.9 {
		t.Fatalf("first pass after restage: %v; want a hit ratio of at least 0.9", r)
	}
	p.teardown(t, v)
	if _, ok, _ := hotset.InStateDir(stateDir()).Load(v.id); ok {
		t.Fatal("DeleteVolume left the volume's hot set behind")
	}
}

// TestWarmUpUnderWrites fills a cache from a hot set covering the whole
// volume while fio writes and verifies all over it: the blocks written
// during the copy must stay out of the cache. Afterwards fio's verify pass
// and a byte-for-byte comparison of the cached device with its origin must
// find no difference.
func TestWarmUpUnderWrites(t *testing.T) {
	p, v, dev := ownEngineVolume(t, "warmwrites", 128<<20)
	all := make([]uint64, 128<<20/(64<<10))
	for i := range all {
		all[i] = uint64(i)
	}
	if err := hotset.InStateDir(stateDir()).Save(v.id, hotset.FromBlocks(all, 128)); err != nil {
		t.Fatal(err)
	}
	writer, out := startVerifyingWriter(t, "warmwrites", dev)
	res, err := realEngine(cache.NoFaults{}).SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: 128 << 20, Mode: cache.ModeReadCache, Warm: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm-up under writes: %d blocks mapped, %d written during the copy and left out, in %v", res.Warmed.Blocks, res.Warmed.Dropped, res.Warmed.Duration)
	if res.Warmed.Blocks == 0 || res.Warmed.Dropped == 0 {
		t.Fatalf("the warm-up mapped %d blocks and left out %d written during the copy: both must be > 0 for the test to prove anything\n%s", res.Warmed.Blocks, res.Warmed.Dropped, out)
	}
	checkWritesVerified(t, writer, out, v, "the warm-up")
	if _, err := realEngine(cache.NoFaults{}).SetCache(ctx(t), v.id, nil); err != nil {
		t.Fatal(err)
	}
	removeVolume(t, p, v)
}

// ownEngineVolume starts a plugin that leaves the cache to an engine of
// the test's own, whose locks the plugin does not share (so the plugin
// promotes nothing), and provisions and stages a raw block volume of size
// bytes, filled with random bytes.
func ownEngineVolume(t *testing.T, name string, size int64) (*plugin, *volume, string) {
	t.Helper()
	p := startPlugin(t, guestEnv(t), "--promote-interval=0")
	v := p.provision(t, name, size, nil, blockCapability())
	p.stage(t, v)
	dev := cache.DevicePath(v.id)
	sh(t, "dd if=/dev/urandom of=%s bs=1M count=%d oflag=direct status=none", dev, size>>20)
	return p, v, dev
}

// startVerifyingWriter starts fio writing 8192 random 4 KiB blocks of the
// first 128 MiB of dev and verifying each, and returns once its writes are
// under way. The simulated HDD's seeks make the writes outlast a copy of
// that much on any machine.
func startVerifyingWriter(t *testing.T, name, dev string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	writer := childCommand(t, "fio", "--name="+name, "--filename="+dev, "--size=128M", "--rw=randwrite", "--bs=4k",
		"--io_size=32M", "--direct=1", "--ioengine=libaio", "--iodepth=8", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1",
		"--randrepeat=0")
	out := &lockedBuffer{}
	writer.Stdout, writer.Stderr = out, out
	written := bytesWritten(t, dev)
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	err := poll("fio's writes to reach "+dev, 100*time.Millisecond, func() (bool, string, error) {
		return bytesWritten(t, dev) > written+(1<<20), "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return writer, out
}

// checkWritesVerified waits for the writer, which verifies every block it
// wrote, and checks that the cached device reads what its origin holds.
func checkWritesVerified(t *testing.T, writer *exec.Cmd, out *lockedBuffer, v *volume, during string) {
	t.Helper()
	if err := waitChild(writer); err != nil {
		t.Fatalf("fio found a wrong block or an I/O error after %s: %v\n%s", during, err, out)
	}
	got := sh(t, "dd if=%s bs=1M iflag=direct status=none | sha256sum", cache.DevicePath(v.id))
	want := sh(t, "dd if=/dev/%s/%s bs=1M iflag=direct status=none | sha256sum", originVG, v.id)
	if got != want {
		t.Fatalf("the cached device reads %s, its origin %s: a block written during %s is stale in the cache", got, want, during)
	}
	st := cacheStatus(t, v.id)
	t.Logf("device equals its origin; %d blocks cached, reads so far %d hits, %d misses", st.CacheUsed, st.ReadHits, st.ReadMisses)
}

// removeVolume unstages and deletes a volume.
func removeVolume(t *testing.T, p *plugin, v *volume) {
	t.Helper()
	p.unstage(t, v)
	if _, err := p.csi.Controller.DeleteVolume(ctx(t), deleteRequest(v)); err != nil {
		t.Fatal(err)
	}
}

// TestPromotionUnderWrites: a promotion copies blocks into the free blocks
// of a cache that serves (the engine loaded it on the cleaner, so it knows
// which blocks the cache maps) while fio writes and verifies across the
// volume; every block written during a copy is left unmapped, and the
// device reads what its origin holds. The second promotion keeps the
// first one's blocks, some of them written meanwhile.
func TestPromotionUnderWrites(t *testing.T) {
	p, v, dev := ownEngineVolume(t, "promotewrites", 128<<20)
	engine := realEngine(cache.NoFaults{}, cache.WithPromoter())
	if err := hotset.InStateDir(stateDir()).Delete(v.id); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: 128 << 20, Mode: cache.ModeReadCache, Warm: true}); err != nil {
		t.Fatal(err)
	}
	if got := livePolicy(t, v.id); got != cache.PolicyFilling {
		t.Fatalf("the cache runs %q, want %q", got, cache.PolicyFilling)
	}
	writer, out := startVerifyingWriter(t, "promotewrites", dev)
	var dropped uint64
	perHalf := (64 << 20) / (table(t, v.id).Target.(dm.CacheTarget).BlockSectors * dm.SectorSize)
	for half := range uint64(2) {
		blocks := make([]uint64, perHalf)
		for i := range blocks {
			blocks[i] = half*perHalf + uint64(i)
		}
		// Blocks a promotion hands back (left) are the promoter's next
		// batch; under writes every batch must map what was not written.
		var mapped uint64
		for try := 1; len(blocks) > 0; try++ {
			if try > 5 {
				t.Fatalf("promotion %d: %d blocks still handed back after 5 tries", half+1, len(blocks))
			}
			res, left, err := engine.Promote(ctx(t), v.id, blocks)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("promotion %d, try %d, under writes: %d blocks mapped, %d kept, %d written meanwhile and left out, %d left, copied while serving: %v, in %v (%v suspended, %v uncached)",
				half+1, try, res.Blocks, res.Kept, res.Dropped, len(left), res.CopiedWhileServing, res.Duration, res.Suspended, res.Uncached)
			if !res.CopiedWhileServing {
				t.Fatalf("promotion %d: copied with the cache swapped out, want a copy while it served", half+1)
			}
			mapped, dropped, blocks = mapped+res.Blocks, dropped+res.Dropped, left
		}
		if mapped == 0 {
			t.Fatalf("promotion %d mapped no block", half+1)
		}
	}
	if dropped == 0 {
		t.Fatalf("no block written during the promotions was left out: the test proves nothing\n%s", out)
	}
	checkWritesVerified(t, writer, out, v, "a promotion")
	if _, err := engine.SetCache(ctx(t), v.id, nil); err != nil {
		t.Fatal(err)
	}
	removeVolume(t, p, v)
}

// waitPromoterIdle waits until the plugin has promoted at least once, has
// no promotion running, and has started none for three promote intervals
// and six times as long as its last promotion took (the promoter's pacing
// may hold a batch back for five).
func waitPromoterIdle(t *testing.T, p *plugin) {
	t.Helper()
	last, since := -1, time.Now()
	err := poll("the promoter to catch up", agent.DefaultPromoteInterval, func() (bool, string, error) {
		log := p.log.String()
		started, ended := strings.Count(log, `"Promoting the blocks read"`), promotedLine.FindAllStringSubmatch(log, -1)
		if started != last {
			last, since = started, time.Now()
		}
		if len(ended) == 0 || len(ended) != started {
			return false, fmt.Sprintf("%d promotions started, %d ended", started, len(ended)), nil
		}
		took, err := time.ParseDuration(ended[len(ended)-1][1])
		if err != nil {
			return false, "", err
		}
		quiet := time.Since(since)
		return quiet >= 3*agent.DefaultPromoteInterval && quiet >= 6*took, fmt.Sprintf("%d promotions, the last took %v, none started for %v", started, took, quiet), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.diagnose())
	}
}

// TestColdPassesBackToBack reads 24 MiB of new data on a 128 MiB cache six
// times, one second apart, and logs each pass's hit ratio: how the promoter
// does when the application gives it no idle time (not in the default run;
// SSDCACHE_GUEST_RUN='^TestColdPassesBackToBack$'). Figures, not verdicts.
func TestColdPassesBackToBack(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	v := p.provision(t, "backtoback", 256<<20, cached("128Mi"), fsCapability("ext4"))
	p.stage(t, v)
	p.publish(t, v)
	sums := dataset(t, v.target, 24)
	var ratios []string
	for pass := 1; pass <= 6; pass++ {
		r := readPass(t, v.id, sums)
		ratios = append(ratios, fmt.Sprintf("%.2f", r.hitRatio()))
		t.Logf("pass %d: %v", pass, r)
		time.Sleep(time.Second)
	}
	t.Logf("hit ratio per pass, back to back: %s", strings.Join(ratios, ", "))
	logPromotions(t, p)
	p.teardown(t, v)
}

var (
	keptLine     = regexp.MustCompile(`"Mapped the kept cache blocks again".* blocks=(\d+) .*kept=(\d+)`)
	promotedLine = regexp.MustCompile(`"Promoted the blocks read".* duration="?([0-9.a-zµ]+)`)
	uncachedLine = regexp.MustCompile(`"Promoted the blocks read".* promoted=(\d+) .*duration="?([0-9.a-zµ]+)"? uncached="?([0-9.a-zµ]+)`)
)

// logPromotions logs how many blocks the promotions so far mapped, how long
// they took and how long of that the volume was left uncached. A figure,
// not a verdict.
func logPromotions(t *testing.T, p *plugin) {
	t.Helper()
	var blocks int
	var took, uncached time.Duration
	lines := uncachedLine.FindAllStringSubmatch(p.log.String(), -1)
	for _, m := range lines {
		n, _ := strconv.Atoi(m[1])
		d, err1 := time.ParseDuration(m[2])
		u, err2 := time.ParseDuration(m[3])
		if err1 != nil || err2 != nil {
			t.Fatalf("promotion line %q: %v %v", m[0], err1, err2)
		}
		blocks, took, uncached = blocks+n, took+d, uncached+u
	}
	t.Logf("%d promotions mapped %d blocks in %v, of which the volume was uncached %v", len(lines), blocks, took.Round(time.Millisecond), uncached.Round(time.Millisecond))
}

// TestPromotionOfAVolumeWithAPartialLastBlock: a 100 MiB volume in cache
// blocks of 96 KiB (not a power of two) ends in a partial block, which
// dm-cache never caches. Reads of the whole volume's end missed it too;
// counted as a block to promote, its copy read past the origin's end and
// failed every promotion with EOF. Now the promotion maps the whole blocks
// read, and the device reads what its origin holds.
func TestPromotionOfAVolumeWithAPartialLastBlock(t *testing.T) {
	const blockSectors = 192 // 96 KiB
	p, v, dev := ownEngineVolume(t, "partialblock", 100<<20)
	engine := realEngine(cache.NoFaults{}, cache.WithPromoter(), cache.WithBlockSectors(blockSectors))
	if err := hotset.InStateDir(stateDir()).Delete(v.id); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: 32 << 20, Mode: cache.ModeReadCache, Warm: true}); err != nil {
		t.Fatal(err)
	}
	live := table(t, v.id)
	target := live.Target.(dm.CacheTarget)
	if target.BlockSectors != blockSectors || live.Length%blockSectors == 0 {
		t.Fatalf("table %s: want %d-sector blocks and a partial last one", live, blockSectors)
	}
	if _, tracked, err := engine.ReadBlocks(ctx(t), v.id, live); err != nil || !tracked {
		t.Fatalf("misses not tracked: %v", err)
	}
	sh(t, "dd if=%s of=/dev/null bs=64k skip=%d iflag=direct status=none", dev, (100<<20-8<<20)/(64<<10)) // the last 8 MiB
	blocks, _, err := engine.ReadBlocks(ctx(t), v.id, live)
	if err != nil || len(blocks) == 0 {
		t.Fatalf("blocks missed %v (%v), want those of the last 8 MiB", blocks, err)
	}
	res, left, err := engine.Promote(ctx(t), v.id, blocks)
	if err != nil || res.Blocks == 0 || len(left) != 0 {
		t.Fatalf("promotion of %d blocks: %+v, %d left, %v; want them mapped", len(blocks), res, len(left), err)
	}
	origin := fmt.Sprintf("/dev/block/%s", target.Origin)
	if live := table(t, v.id); live.Target.Type() != "cache" {
		t.Fatalf("table %s after the promotion, want the cache", live)
	}
	// The last 8 MiB, read from the cache where it maps them. O_DIRECT on
	// both sides: a page the origin's device cached before the volume was
	// written (udev's probe at activation) would differ from what it holds.
	sh(t, "cmp <(dd if=%s bs=1M skip=92 count=8 iflag=direct status=none) <(dd if=%s bs=1M skip=92 count=8 iflag=direct status=none)", dev, origin)
	t.Logf("%d blocks missed in the last 8 MiB, %d promoted, %d cached; the device reads what its origin holds", len(blocks), res.Blocks, cachedBytes(t, v.id)/(blockSectors*dm.SectorSize))
	if _, err := engine.SetCache(ctx(t), v.id, nil); err != nil {
		t.Fatal(err)
	}
	removeVolume(t, p, v)
}
