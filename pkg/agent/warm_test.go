package agent

import (
	"context"
	"strings"
	"testing"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
)

func TestAttachFillsFromTheHotSetAndSaysSo(t *testing.T) {
	n := newNode(t)
	if err := n.hotSets.Save(vol, hotset.FromBlocks([]uint64{1, 2, 8}, 128)); err != nil {
		t.Fatal(err)
	}
	n.stage(t, nil)
	b := admitted(ssdv1.ModeReadCache, gib)
	b.Spec.Warmup = ssdv1.WarmupHotSet
	r, c, rec := n.reconciler(t, b)
	reconcileOnce(t, r)
	w := get(t, c).Status.LastWarmup
	if w == nil || w.Blocks != 3 || w.Bytes != 3*128*512 || w.WrittenBlocks != 0 || w.CompletionTime.IsZero() {
		t.Fatalf("lastWarmup %+v, want 3 blocks of 64 KiB", w)
	}
	var reasons []string
	for len(rec.Events) > 0 {
		reasons = append(reasons, <-rec.Events)
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "CacheAttached") || !strings.Contains(reasons[1], "CacheWarmed") ||
		!strings.Contains(reasons[1], "196608 bytes") {
		t.Fatalf("events %q, want CacheAttached then CacheWarmed with the bytes", reasons)
	}
}

func TestWarmupNoneStartsCold(t *testing.T) {
	n := newNode(t)
	_ = n.hotSets.Save(vol, hotset.FromBlocks([]uint64{1}, 128))
	n.stage(t, nil)
	b := admitted(ssdv1.ModeReadCache, gib)
	b.Spec.Warmup = ssdv1.WarmupNone
	r, c, _ := n.reconciler(t, b)
	reconcileOnce(t, r)
	if w := get(t, c).Status.LastWarmup; w != nil || len(n.dev.Copied) != 0 {
		t.Fatalf("warmed with policy None: %+v, copies %v", w, n.dev.Copied)
	}
}

// A revoked admission keeps the hot set (a later admission starts warm); a
// deleted binding takes it along.
func TestHotSetsGoWithTheirBinding(t *testing.T) {
	n := newNode(t)
	_ = n.hotSets.Save(vol, hotset.FromBlocks([]uint64{1}, 128))
	n.stage(t, nil)
	revoked := admitted(ssdv1.ModeReadCache, gib)
	revoked.Status.NodeName, revoked.Status.VolumeHandle = "", ""
	r, c, _ := n.reconciler(t, revoked)
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := n.hotSets.Load(vol); !ok {
		t.Fatal("the sweep deleted the hot set of a volume whose binding is only not admitted")
	}
	b := get(t, c)
	b.Status.NodeName, b.Status.VolumeHandle = node, vol
	if err := c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if err := c.Delete(context.Background(), get(t, c)); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if _, ok, _ := n.hotSets.Load(vol); ok {
		t.Fatal("the deleted binding's hot set was kept")
	}
}

func TestWarmupLimitBoundsTheCopy(t *testing.T) {
	for limit, want := range map[string]int{"128Ki": 2, "0": 0, "": 3} {
		n := newNode(t)
		if err := n.hotSets.Save(vol, hotset.FromBlocks([]uint64{1, 2, 8}, 128)); err != nil {
			t.Fatal(err)
		}
		n.stage(t, nil)
		b := admitted(ssdv1.ModeReadCache, gib)
		b.Spec.WarmupLimit = limit
		r, c, _ := n.reconciler(t, b)
		reconcileOnce(t, r)
		got := 0
		if w := get(t, c).Status.LastWarmup; w != nil {
			got = int(w.Blocks)
		}
		if got != want {
			t.Errorf("warmupLimit %q: %d blocks warmed, want %d", limit, got, want)
		}
	}
}

// A resumed cache reports the blocks the SSD still held and mapped again
// without reading the origin, and says so in its event.
func TestResumeReportsTheKeptBlocks(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, rec := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	n.meta.Put("/dev/nvme/"+vol+".cache-meta", dm.CacheMetadata{BlockSectors: 128, CacheBlocks: gib / (128 * 512), Policy: "smq",
		Mappings: []dm.Mapping{{Cache: 0, Origin: 3}, {Cache: 1, Origin: 40}}})
	setMode := func(mode ssdv1.CacheMode) {
		t.Helper()
		b := get(t, c)
		b.Spec.Mode = mode
		if err := c.Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		reconcileOnce(t, r)
	}
	setMode(ssdv1.ModePaused)
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	n.dev.Copied = nil
	setMode(ssdv1.ModeReadCache)
	w := get(t, c).Status.LastWarmup
	if w == nil || w.KeptBlocks != 2 || w.Blocks != 0 || len(n.dev.Copied) != 0 {
		t.Fatalf("lastWarmup after resume %+v, copies %v; want the 2 blocks kept and nothing copied", w, n.dev.Copied)
	}
	var warmed string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "CacheWarmed") {
			warmed = e
		}
	}
	if !strings.Contains(warmed, "2 blocks the SSD still held") {
		t.Fatalf("resume event %q, want one naming the 2 kept blocks", warmed)
	}
}
