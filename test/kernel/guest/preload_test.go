package guest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
)

// TestPreloadNamedFiles: files written to a cached ext4 volume and never
// read are preloaded by name, by the engine the node agent runs for a
// CacheBinding's spec.preloadPaths, on the volume the plugin staged: their
// first read comes from the cache, while files beside them, not named,
// read from the HDD. FIEMAP's extents are checked against the device
// itself: the bytes there are the file's.
func TestPreloadNamedFiles(t *testing.T) {
	e := guestEnv(t)
	// The plugin's promoter keeps its cache on smq's cleaner variant, which
	// promotes nothing (smq would promote most of the blocks just written).
	// It promotes blocks read; none are read until the preload is done, as
	// the test's engine, which stands for the agent, shares no lock with it.
	p := startPlugin(t, e)
	v := p.provision(t, "preload", 256<<20, cached("128Mi"), fsCapability("ext4"))
	p.stage(t, v)
	p.publish(t, v)
	for _, d := range []string{"models", "logs"} {
		if err := os.MkdirAll(filepath.Join(v.target, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	named, other := dataset(t, filepath.Join(v.target, "models"), 24), dataset(t, filepath.Join(v.target, "logs"), 24)

	rep, err := realEngine(nil).Preload(context.Background(), v.id, []string{"models", "not/there"})
	if err != nil {
		t.Fatalf("preload: %v\n%s", err, p.diagnose())
	}
	start := time.Now()
	sh(t, "dd if=/dev/%s/%s of=/dev/null bs=1M count=%d iflag=direct status=none", originVG, v.id, max(rep.Blocks*rep.BlockBytes>>20, 1))
	hdd := time.Since(start)
	t.Logf("preload: %+v; a sequential read of as many bytes from the origin took %v: %.2f times (a figure, not a verdict)", rep, hdd, rep.Duration.Seconds()/hdd.Seconds())
	if rep.Files != 24 || rep.FileBytes != 24<<20 || rep.Blocks*rep.BlockBytes < 24<<20 || !slices.Equal(rep.Missing, []string{"not/there"}) {
		t.Fatalf("preload report %+v: want 24 files of 1 MiB copied, not/there missing", rep)
	}
	expectExtentsHoldTheFile(t, v.id, filepath.Join(v.target, "models"))
	if r := readPass(t, v.id, named); r.hitRatio() < 0.9 {
		t.Fatalf("first read of the preloaded files: %v; want a hit ratio of at least 0.9\n%s", r, p.diagnose())
	} else {
		t.Logf("first read of the preloaded files: %v", r)
	}
	if r := readPass(t, v.id, other); r.hitRatio() > 0.5 {
		t.Fatalf("first read of files not named: %v; want them read from the origin, not preloaded", r)
	} else {
		t.Logf("first read of the files not named: %v", r)
	}
	p.teardown(t, v)
}

// expectExtentsHoldTheFile maps one file of dir through the volume's
// mounted filesystem and compares the device's bytes at its extents, read
// directly from the cached device, with the file's.
func expectExtentsHoldTheFile(t *testing.T, id, dir string) {
	t.Helper()
	name := filepath.Join(dir, "file-000")
	want, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := blockdev.NewHost(nil).DevNum(cache.DevicePath(id))
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(mountRoot(t, dir), name)
	var extents []fileblocks.Extent
	found, err := fileblocks.NewHost().Map(context.Background(), dev, []string{rel}, func(e fileblocks.Extent) bool {
		extents = append(extents, e)
		return true
	})
	if err != nil || found.Files != 1 || found.Bytes != uint64(len(want)) {
		t.Fatalf("map %s: %+v, %v; want one file of %d bytes", rel, found, err, len(want))
	}
	// ext4 makes 1 KiB blocks on a volume this small: extents need not be
	// aligned for O_DIRECT, so the device is read through its page cache,
	// dropped first.
	sh(t, "echo 3 > /proc/sys/vm/drop_caches")
	f, err := os.Open(cache.DevicePath(id))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf []byte
	for _, x := range extents {
		part := make([]byte, x.Length)
		if _, err := f.ReadAt(part, int64(x.Offset)); err != nil {
			t.Fatal(err)
		}
		buf = append(buf, part...)
	}
	if !slices.Equal(buf, want) {
		t.Fatalf("the device's bytes at %s's extents %v are not the file's", rel, extents)
	}
}

// mountRoot is the mount point dir is under: the publish target.
func mountRoot(t *testing.T, dir string) string {
	t.Helper()
	return sh(t, "findmnt -n -o TARGET --target %s", dir)
}
