package main

import (
	"context"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
)

// Without the agent, a staged volume gets the cache of its volume context,
// unless it has one already or another call holds it; an uncached class's
// volume stays linear.
func TestStandaloneAttachesTheVolumeContextsCache(t *testing.T) {
	ctx := context.Background()
	d, l := dmfake.New(), lvmfake.New()
	l.AddVG("hdd", 100<<30, lvm.PoolTagPrefix+"origin")
	l.AddVG("nvme", 10<<30, lvm.PoolTagPrefix+"cache")
	e := cache.NewEngine(cache.Layers{DM: d, LVM: l, Dev: blockdevfake.New()}, cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil)
	locks := cache.NewVolumeLocks()
	attach := attachFromVolumeContext(e, locks)
	stage := func(id string) csi.StagedVolume {
		if _, err := l.CreateLV(ctx, "hdd", id, 10<<30, lvm.Tags(id, lvm.RoleOrigin)); err != nil {
			t.Fatal(err)
		}
		origin, err := e.OriginLV(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Stage(ctx, cache.StageSpec{VolumeID: id, Origin: origin}); err != nil {
			t.Fatal(err)
		}
		return csi.StagedVolume{ID: id, OriginBytes: origin.Bytes}
	}
	targetOf := func(id string) dm.Target {
		tbl, err := d.Table(ctx, cache.DeviceName(id))
		if err != nil {
			t.Fatal(err)
		}
		return tbl.Target
	}
	readcache := map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": "10%"}

	cached := stage("cached")
	cached.Context = readcache
	attach(ctx, cached)
	if _, ok := targetOf("cached").(dm.CacheTarget); !ok {
		t.Fatalf("readcache volume: table %v, want a cache", targetOf("cached"))
	}
	st, _ := e.Inspect(ctx, "cached")
	cached.Context = map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": "20%"}
	attach(ctx, cached) // a repeated NodeStage keeps the cache it has
	if again, _ := e.Inspect(ctx, "cached"); again.Spec != st.Spec || st.Spec.SizeBytes != 1<<30 {
		t.Fatalf("cache %+v, then %+v; want 1Gi kept", st.Spec, again.Spec)
	}

	plain := stage("plain")
	plain.Context = map[string]string{"ssdcache.io/cache-mode": "none"}
	attach(ctx, plain)
	if _, ok := targetOf("plain").(dm.LinearTarget); !ok {
		t.Fatalf("uncached volume: table %v, want linear", targetOf("plain"))
	}

	busy := stage("busy")
	busy.Context = readcache
	locks.TryAcquire("busy")
	attach(ctx, busy)
	if _, ok := targetOf("busy").(dm.LinearTarget); !ok {
		t.Fatalf("volume held by another call: table %v, want it left linear", targetOf("busy"))
	}
}
