package cache

import (
	"context"
	"slices"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

// crash is panicked with to model kill -9 at a fault point.
type crash struct{ point string }

// crashAt is FaultPoints that crashes at the n-th point reached.
type crashAt struct {
	n, seen int
	points  []string
}

func (c *crashAt) Reached(_ context.Context, point string) {
	c.points = append(c.points, point)
	c.seen++
	if c.seen == c.n {
		panic(crash{point})
	}
}

// runUntilCrash runs op and reports whether it crashed.
func runUntilCrash(op func()) (crashed bool, point string) {
	defer func() {
		if r := recover(); r != nil {
			c, ok := r.(crash)
			if !ok {
				panic(r)
			}
			crashed, point = true, c.point
		}
	}()
	op()
	return false, ""
}

// Safety rule 5: kill the plugin at every fault point of every operation,
// restart (repeat the call, as the CO and the agent do): the volume always
// converges to the requested state, no device is left suspended and no LV
// leaks.
func TestSafetyRule5_CrashAtEveryStepConverges(t *testing.T) {
	ctx := context.Background()
	ops := []struct {
		name   string
		before func(w *world)
		op     func(w *world) error
		check  func(t *testing.T, w *world)
	}{
		{"stage cached", func(*world) {}, func(w *world) error {
			if _, err := w.engine.Stage(ctx, StageSpec{VolumeID: vol, Origin: w.origin(t)}); err != nil {
				return err
			}
			return w.engine.Attach(ctx, vol, *readCache(gib))
		}, expectCache(dm.Writethrough, 2)},
		{"attach", func(w *world) { w.stage(t, nil) }, func(w *world) error {
			return w.engine.Attach(ctx, vol, *readCache(gib))
		}, expectCache(dm.Writethrough, 2)},
		{"detach", func(w *world) { w.stage(t, readCache(gib)) }, func(w *world) error {
			return w.engine.Detach(ctx, vol)
		}, expectLinear(0)},
		{"resize", func(w *world) { w.stage(t, readCache(gib)) }, func(w *world) error {
			return w.engine.Attach(ctx, vol, *readCache(2 * gib))
		}, expectCache(dm.Writethrough, 2)},
		{"pause", func(w *world) { w.stage(t, readCache(gib)) }, func(w *world) error {
			return w.engine.Attach(ctx, vol, Spec{SizeBytes: gib, Mode: ModePaused})
		}, expectLinear(2)},
		{"unstage", func(w *world) { w.stage(t, readCache(gib)) }, func(w *world) error {
			return w.engine.Unstage(ctx, vol)
		}, expectUnstaged},
		// A restage over the LVs a clean unstage kept maps their blocks
		// again, or, cut short where nothing vouches for them, fills anew.
		{"restage kept", func(w *world) {
			w.stage(t, warmCache(gib))
			w.used(t, 7, 8)
			if err := w.engine.Unstage(ctx, vol); err != nil {
				t.Fatal(err)
			}
		}, func(w *world) error {
			if _, err := w.engine.Stage(ctx, StageSpec{VolumeID: vol, Origin: w.origin(t)}); err != nil {
				return err
			}
			return w.engine.Attach(ctx, vol, *warmCache(gib))
		}, expectCleanMappings(dm.Writethrough)},
		// The agent's visit after a restart attaches the binding's cache
		// again (recovering an interrupted reload), then the promoter goes on.
		{"warm attach", func(w *world) {
			w.stage(t, nil)
			if err := w.hotSets.Save(vol, hotset.FromBlocks([]uint64{1, 2, 40}, blockSecs)); err != nil {
				t.Fatal(err)
			}
		}, func(w *world) error {
			return w.engine.Attach(ctx, vol, *warmCache(gib))
		}, expectCleanMappings(dm.Writethrough)},
		{"promote", func(w *world) {
			w.withPromoter()
			w.stage(t, warmCache(gib))
			w.used(t, 7)
		}, func(w *world) error {
			if err := w.engine.Attach(ctx, vol, *warmCache(gib)); err != nil {
				return err
			}
			_, _, err := w.engine.Promote(ctx, vol, []uint64{3, 4, 5, 90})
			return err
		}, expectCleanMappings(dm.Writethrough)},
		{"hand-over", func(w *world) {
			w.withPromoter()
			w.stage(t, warmCache(gib))
			w.used(t, 7, 8)
		}, func(w *world) error {
			if err := w.engine.Attach(ctx, vol, *warmCache(gib)); err != nil {
				return err
			}
			return w.engine.HandOver(ctx, vol)
		}, expectCleanMappings(dm.Writethrough)},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			for n := 1; ; n++ {
				w := newWorld(t)
				o.before(w)
				fp := &crashAt{n: n}
				w.faults = fp
				crashed, point := runUntilCrash(func() { _ = o.op(w) })
				w.faults = nil
				if crashed {
					w.restart() // what the engine knew in memory died with it
				}
				if err := o.op(w); err != nil {
					t.Fatalf("crash at %q, then retry: %v", point, err)
				}
				o.check(t, w)
				if !crashed {
					if n == 1 {
						t.Fatal("operation reached no fault point")
					}
					t.Logf("crashed at each of %d points: %v", n-1, fp.points)
					return
				}
			}
		})
	}
}

func expectCache(mode dm.CacheMode, lvs int) func(*testing.T, *world) {
	return func(t *testing.T, w *world) {
		t.Helper()
		c, ok := w.table(t).Target.(dm.CacheTarget)
		if !ok || c.Mode != mode {
			t.Fatalf("table %q, want a %s cache", w.table(t), mode)
		}
		expectClean(t, w, lvs)
	}
}

// expectCleanMappings: a cache of mode whose metadata maps only clean
// blocks that were copied from the origin (by the fill or promotion that
// mapped them), or nothing at all: never a block nobody copied, never a
// dirty one, which writethrough would trust over the origin.
func expectCleanMappings(mode dm.CacheMode) func(*testing.T, *world) {
	return func(t *testing.T, w *world) {
		t.Helper()
		expectCache(mode, 2)(t, w)
		for _, m := range w.liveMeta(t).Mappings {
			if m.Dirty {
				t.Fatalf("mapping %+v is dirty after a crash and a retry", m)
			}
			if !slices.Contains([]uint64{1, 2, 40, 3, 4, 5, 90, 7, 8}, m.Origin) {
				t.Fatalf("mapping %+v names a block no fill or promotion copied", m)
			}
		}
	}
}

func expectLinear(lvs int) func(*testing.T, *world) {
	return func(t *testing.T, w *world) {
		t.Helper()
		if _, ok := w.table(t).Target.(dm.LinearTarget); !ok {
			t.Fatalf("table %q, want linear", w.table(t))
		}
		expectClean(t, w, lvs)
	}
}

// expectUnstaged: no device, and either no cache LVs or the pair a clean
// unstage keeps, tagged as such (an untagged pair would leak).
func expectUnstaged(t *testing.T, w *world) {
	t.Helper()
	if devs, _ := w.dm.List(context.Background()); len(devs) != 0 {
		t.Fatalf("devices left: %v", devs)
	}
	lvs := w.mustObserve(t).cacheLVs
	if _, kept := taggedClean(lvs); len(lvs) != 0 && (!kept || len(lvs) != 2) {
		t.Fatalf("LVs leaked: %v", lvs)
	}
}

func expectClean(t *testing.T, w *world, lvs int) {
	t.Helper()
	name := DeviceName(vol)
	if w.dm.Suspended(name) || w.dm.HasInactive(name) {
		t.Fatal("device left suspended or with an inactive table")
	}
	if got := w.cacheLVs(t); len(got) != lvs {
		t.Fatalf("cache LVs %v, want %d", got, lvs)
	}
	if !slices.Contains([]int{0, 2}, lvs) {
		t.Fatalf("bad expectation %d", lvs)
	}
}
