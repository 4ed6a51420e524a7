package cache

import (
	"context"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// Admission charges each cache cachesize.Footprint of its node's pool: what
// the engine's two LVs take of the pool (cachesize.AttachedBytes) and room
// for a promotion's second metadata LV. The attached part must be exact, whatever the size: a
// 16 MiB cache takes 24 MiB of 4 MiB extents, a size that is not whole
// extents is rounded up, and a cache of more than a million blocks gets
// larger blocks and so less metadata. (The fake LVM rounds sizes up to
// extents as lvcreate does; the kernel suite checks lvcreate itself.)
func TestCacheLVsTakeTheirFootprint(t *testing.T) {
	w := newWorld(t)
	w.lvm.AddVG("ssdcache-nvme", 100*gib) // room for a cache whose blocks double
	for _, size := range []uint64{16 << 20, 16<<20 + 512, 1 << 30, 3*gib + 4<<20 + 512, 70 * gib} {
		w.stage(t, readCache(size))
		vg, err := w.lvm.GetVG(context.Background(), "ssdcache-nvme")
		if err != nil {
			t.Fatal(err)
		}
		want := cachesize.AttachedBytes(size, vg.ExtentSize, w.engine.BlockSectors())
		if used := vg.Size - vg.Free; used != want {
			t.Errorf("a cache of %d bytes: its LVs take %d bytes of the pool, AttachedBytes says %d", size, used, want)
		}
	}
}
