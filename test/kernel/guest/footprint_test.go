package guest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// TestCacheLVsTakeTheirFootprint: admission charges each cache
// cachesize.Footprint of its node's pool, whose attached part
// (cachesize.AttachedBytes) must be what lvcreate really allocates for the
// cache's two LVs. The smallest cache (its metadata LV is
// 4 MiB and a few bytes, two extents), one of a size that is not whole
// extents, and a larger one each take exactly their footprint of the pool.
func TestCacheLVsTakeTheirFootprint(t *testing.T) {
	p := startPlugin(t, guestEnv(t), "--promote-interval=0")
	v := p.provision(t, "footprint", 128<<20, nil, blockCapability())
	p.stage(t, v)
	engine := realEngine(cache.NoFaults{})
	before, extent := vgUsed(t)
	for _, size := range []uint64{16 << 20, 16<<20 + 512, 100<<20 + 4096} {
		if _, err := engine.SetCache(ctx(t), v.id, &cache.Spec{SizeBytes: size, Mode: cache.ModeReadCache}); err != nil {
			t.Fatal(err)
		}
		used, _ := vgUsed(t)
		want := cachesize.AttachedBytes(size, extent, engine.BlockSectors())
		if used-before != want {
			t.Errorf("a cache of %d bytes: its LVs take %d bytes of %s (lvs: %s), AttachedBytes says %d",
				size, used-before, cacheVG, sh(t, "lvs --noheadings --units b -o lv_name,lv_size %s", cacheVG), want)
		}
		t.Logf("a cache of %d bytes takes %d bytes of %d-byte extents", size, used-before, extent)
	}
	if _, err := engine.SetCache(ctx(t), v.id, nil); err != nil {
		t.Fatal(err)
	}
	removeVolume(t, p, v)
}

// vgUsed returns the bytes the cache VG has allocated and its extent size.
func vgUsed(t *testing.T) (used, extent uint64) {
	t.Helper()
	f := strings.Fields(sh(t, "vgs --noheadings --units b --nosuffix -o vg_size,vg_free,vg_extent_size %s", cacheVG))
	if len(f) != 3 {
		t.Fatalf("vgs %s: %q", cacheVG, f)
	}
	var n [3]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			t.Fatalf("vgs %s: %q: %v", cacheVG, f, err)
		}
		n[i] = v
	}
	return n[0] - n[1], n[2]
}
