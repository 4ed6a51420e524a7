package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

func TestPromoterPromotesReadsThatMissedAndNotThoseThatHit(t *testing.T) {
	n, name, p := warmPromoterNode(t)

	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	n.miss(name, 20, 10) // blocks 20-29 of the 10 GiB origin
	n.dm.StatusOverride[name] = status(0, 100, 0, "rw -")
	p.Tick(context.Background())
	if len(n.dev.Copied) != 0 {
		t.Fatalf("promoted after 100 misses, fewer than a 128th of the cache's 16384 blocks: %v", n.dev.Copied)
	}
	n.dm.StatusOverride[name] = status(0, 200, 0, "rw -")
	p.Tick(context.Background())
	if len(n.dev.Copied) != 0 {
		t.Fatalf("promoted a batch of 10 blocks, fewer than %d, however many misses: %v", MinPromoteBlocks, n.dev.Copied)
	}
	n.miss(name, 30, 10) // blocks 30-39 miss: the HDD is busy
	n.dm.StatusOverride[name] = status(0, 210, 0, "rw -")
	p.Tick(context.Background())
	if len(n.dev.Copied) != 0 {
		t.Fatalf("promoted while the volume was reading: %v", n.dev.Copied)
	}
	p.Tick(context.Background()) // the reads paused
	md, _ := n.meta.Get("/dev/nvme/" + vol + ".cache-meta")
	if len(md.Mappings) != 20 || md.Mappings[0] != (dm.Mapping{Cache: 0, Origin: 20}) {
		t.Fatalf("mappings after missed reads: %v, want blocks 20-39", md.Mappings)
	}
	if got := testutil.ToFloat64(n.metrics.batchPromoted.With(n.metrics.labels(vol))); got != 20 {
		t.Fatalf("batch-promoted blocks metric %v, want 20", got)
	}

	copies, looks := len(n.dev.Copied), n.reads.Takes
	// Reads of blocks 20-29 now hit: the miss counter stays.
	p.Tick(context.Background())
	p.Tick(context.Background())
	if len(n.dev.Copied) != copies {
		t.Fatalf("reads that hit caused a promotion: %v", n.dev.Copied[copies:])
	}
	if n.reads.Takes != looks+1 {
		// One look after the batch (its reads were counted by the table
		// it replaced); then none while every read hits.
		t.Fatalf("%d looks at the read areas over two ticks in which every read hit, want 1", n.reads.Takes-looks)
	}

	n.miss(name, 300, 10) // misses on a full cache are smq's to handle
	n.dm.StatusOverride[name] = "0 20971520 cache 8 10/4096 128 16384/16384 0 900 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -"
	p.Tick(context.Background())
	if len(n.dev.Copied) != copies {
		t.Fatalf("a full cache was promoted into: %v", n.dev.Copied[copies:])
	}
}

func TestPromoterLeavesCachesWithoutWarmupAlone(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	name := cache.DeviceName(vol)
	n.miss(name, 0, 1)
	n.dm.StatusOverride[name] = status(0, 5, 0, "rw -")
	p := NewPromoter(n.engine, n.locks, n.metrics, n.clock, 0, nil)
	p.Tick(context.Background())
	p.Tick(context.Background())
	if len(n.dev.Copied) != 0 {
		t.Fatalf("a cache without warm-up was promoted into: %v", n.dev.Copied)
	}
}

// One tick reads the state of every staged volume. #14 made it one States
// call, when each read was a dmsetup process; through the control device a
// volume's table and status are two ioctls, as States makes them, and the
// monitor reads each volume on its own since issue 37 point 2.
func TestMonitorTickReadsEveryVolume(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	for _, id := range []string{"pvc-2", "pvc-3"} {
		if _, err := n.lvm.CreateLV(context.Background(), "hdd", id, gib, lvm.Tags(id, lvm.RoleOrigin)); err != nil {
			t.Fatal(err)
		}
		origin, err := n.engine.OriginLV(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.engine.Stage(context.Background(), cache.StageSpec{VolumeID: id, Origin: origin}); err != nil {
			t.Fatal(err)
		}
		if err := n.engine.Attach(context.Background(), id, cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}); err != nil {
			t.Fatal(err)
		}
	}
	// Each volume's state is read on its own (through ioctls, microseconds
	// each), so that one whose cache hangs holds up no other (issue 37
	// point 2); one tick observes them all.
	n.monitor.Tick(context.Background())
	for _, id := range []string{vol, "pvc-2", "pvc-3"} {
		if got := testutil.ToFloat64(n.metrics.totalBlocks.With(n.metrics.labels(id))); got == 0 {
			t.Fatalf("the tick did not observe the cache of %s", id)
		}
	}
}

// Reads made while a promotion ran were counted as misses, if at all, by a
// table it replaced, whose counters are gone; after a promotion that mapped
// a batch they count towards the next one.
func TestPromoterCountsReadsMadeDuringAPromotion(t *testing.T) {
	n, name, p := warmPromoterNode(t)
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	for area := uint64(0); area < 2; area++ {
		n.miss(name, area*10, 10)
	}
	n.dm.StatusOverride[name] = status(0, 500, 0, "rw -")
	p.Tick(context.Background())
	p.Tick(context.Background()) // the reads paused: promotes blocks 0-19
	if promotions(n) != 1 {
		t.Fatalf("copies %v, want one promotion", n.dev.Copied)
	}
	for area := uint64(10); area < 23; area++ { // 130 blocks read meanwhile
		n.miss(name, area*10, 10)
	}
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -") // the reloaded cache counts from zero
	p.Tick(context.Background())
	p.Tick(context.Background())
	if promotions(n) != 2 {
		t.Fatalf("copies %v: the reads made during the first promotion were not promoted", n.dev.Copied)
	}
	n.miss(name, 500, 10) // after a promotion of 130 blocks, but with no miss since: kept collecting
	p.Tick(context.Background())
	p.Tick(context.Background())
	if promotions(n) != 2 {
		t.Fatalf("copies %v: ten blocks read without a miss were promoted", n.dev.Copied)
	}
}

// A promotion reads its blocks from the HDD again, so it waits for the
// volume's reads to pause, however few blocks each look finds (an
// application reading small files keeps the HDD seeking at a few MB/s); a
// volume that keeps reading gets its batch after promoteBusyWait. What one
// promotion could not hold is promoted at the next pause, without
// new reads of those blocks.
func TestPromoterWaitsForReadsToPauseAndPromotesTheRestAtTheNext(t *testing.T) {
	n, name, p := warmPromoterNode(t)
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	for tick := range 6 { // the batch begins at tick 0
		n.miss(name, uint64(tick)*10, 10) // 10 blocks a look
		n.dm.StatusOverride[name] = status(0, uint64(100*(tick+1)), 0, "rw -")
		n.clock.Step(promoteBusyWait / 5)
		p.Tick(context.Background())
		if got := promotions(n); got != 0 && tick < 5 {
			t.Fatalf("tick %d: promoted while the volume kept reading, before %v: %v", tick, promoteBusyWait, n.dev.Copied)
		}
	}
	if promotions(n) != 1 {
		t.Fatalf("copies %v: a volume reading for %v got no promotion", n.dev.Copied, promoteBusyWait)
	}

	// 2,200 new blocks, more than one promotion holds (2,048 of 64 KiB).
	for area := uint64(100); area < 320; area++ {
		n.miss(name, area*10, 10)
	}
	n.dm.StatusOverride[name] = status(0, 2000, 0, "rw -")
	p.Tick(context.Background())
	p.Tick(context.Background()) // paused: 2,048 blocks
	p.Tick(context.Background()) // still paused: the other 152
	md, _ := n.meta.Get("/dev/nvme/" + vol + ".cache-meta")
	if promotions(n) != 3 || len(md.Mappings) != 60+2200 {
		t.Fatalf("%d promotions, %d blocks mapped; want 3 and 2,260", promotions(n), len(md.Mappings))
	}
}

// warmPromoterNode is a node with a warm cache on vol, empty metadata and a promoter.
func warmPromoterNode(t *testing.T) (*fakeNode, string, *Promoter) {
	t.Helper()
	n := newNode(t)
	n.withPromoter()
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache, Warm: true})
	n.meta.Put("/dev/nvme/"+vol+".cache-meta", dm.CacheMetadata{BlockSectors: 128, CacheBlocks: gib / (128 * 512), Policy: "smq"})
	return n, cache.DeviceName(vol), NewPromoter(n.engine, n.locks, n.metrics, n.clock, 0, nil)
}

// miss stands for reads of count blocks from first on that the cache of
// device name missed.
func (n *fakeNode) miss(name string, first, count uint64) {
	for b := first; b < first+count; b++ {
		n.reads.Miss(name, b*128)
	}
}

// promotions counts the batches copied into caches.
func promotions(n *fakeNode) int {
	count := 0
	for _, c := range n.dev.Copied {
		if strings.HasPrefix(c, "copy ") {
			count++
		}
	}
	return count
}

// Safety rule 4 during a promotion: the SSD fails while the cache is
// swapped out, so its table cannot be loaded again. The volume stays on its
// linear table, and the loss is recorded as a drop (log, metric, binding),
// not left for nobody to notice (found by the kernel suite's SSD failure test).
func TestPromotionThatCannotLoadTheCacheBackIsADrop(t *testing.T) {
	n, name, _ := warmPromoterNode(t)
	var lost []string
	p := NewPromoter(n.engine, n.locks, n.metrics, n.clock, 0, n.monitor.CacheLost)
	n.monitor.onDrop = func(id string) { lost = append(lost, id) }
	failLoadsOnceSwappedOut(n, name)
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	n.miss(name, 20, 20) // a batch worth promoting
	n.dm.StatusOverride[name] = status(0, 500, 0, "rw -")
	p.Tick(context.Background())
	p.Tick(context.Background())

	if tbl, _ := n.dm.Table(context.Background(), name); tbl.Target.Type() != "linear" {
		t.Fatalf("table after the failed promotion %q, want the linear one", tbl)
	}
	if why, ok := n.samples.Dropped(vol); !ok || !strings.Contains(why, "promotion") || len(lost) != 1 {
		t.Fatalf("loss not recorded: %q, bindings told %v", why, lost)
	}
	if got := testutil.ToFloat64(n.metrics.drops.With(n.metrics.labels(vol))); got != 1 {
		t.Fatalf("drops metric %v, want 1", got)
	}
}

// A cache the promoter fills runs smq's cleaner, which promotes nothing;
// once it is full, or its reads are no longer counted, it is handed over to
// smq with its mappings, to replace blocks by use.
func TestPromoterHandsFullOrUnwatchedCachesOverToSmq(t *testing.T) {
	for _, tc := range []struct {
		name     string
		untrack  bool
		used     string
		handOver bool
	}{
		{name: "filling", used: "100/16384"},
		{name: "full", used: "16384/16384", handOver: true},
		{name: "room for less than a batch", used: "16369/16384", handOver: true},
		{name: "room for a batch", used: "16368/16384"},
		{name: "misses not recorded", used: "100/16384", untrack: true, handOver: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			n.withPromoter()
			n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache, Warm: true})
			name := cache.DeviceName(vol)
			before := liveCacheTarget(t, n, name)
			if before.Policy != cache.PolicyFilling {
				t.Fatalf("a cache that warms up starts on policy %q, want %q", before.Policy, cache.PolicyFilling)
			}
			if tc.untrack {
				// As after a restart, on a node where the misses cannot be recorded.
				n.reads.TrackErr = errors.New("permission denied")
				if err := n.reads.Untrack(context.Background(), name); err != nil {
					t.Fatal(err)
				}
			}
			n.dm.StatusOverride[name] = "0 20971520 cache 8 10/4096 128 " + tc.used + " 0 900 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 cleaner 0 rw -"
			NewPromoter(n.engine, n.locks, n.metrics, n.clock, 0, nil).Tick(context.Background())
			after := liveCacheTarget(t, n, name)
			want := before
			if tc.handOver {
				want.Policy = cache.PolicyReplacing
			}
			if after.Params() != want.Params() {
				t.Fatalf("live cache table %q, want %q", after.Params(), want.Params())
			}
		})
	}
}

func liveCacheTarget(t *testing.T, n *fakeNode, name string) dm.CacheTarget {
	t.Helper()
	tbl, err := n.dm.Table(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	live, ok := tbl.Target.(dm.CacheTarget)
	if !ok {
		t.Fatalf("table %v is not a cache", tbl)
	}
	return live
}

// failLoadsOnceSwappedOut makes the SSD fail once a promotion swapped the
// cache of device name out for the linear table: no cache table loads again.
func failLoadsOnceSwappedOut(n *fakeNode, name string) {
	swapped := false
	n.dm.Record = func(event string) {
		switch {
		case strings.HasPrefix(event, "dm load "+name+" ") && strings.Contains(event, " linear "):
			swapped = true
		case event == "dm resume "+name && swapped:
			n.dm.FailOn["load"] = errors.New("device-mapper: reload ioctl failed: Input/output error")
		}
	}
}

// A promotion that loaded the table again restarted its miss counter, which
// may come back at the value the promoter last saw: the next tick looks at
// the reads all the same, then no more while the counter stands still.
func TestPromoterLooksAfterAReloadWhateverTheMissCounter(t *testing.T) {
	n, name, p := warmPromoterNode(t)
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	looks := n.reads.Takes
	p.Tick(context.Background())
	if n.reads.Takes != looks {
		t.Fatalf("looked at the reads of a volume without a miss")
	}
	p.reads[vol].reloaded = true // as promote sets it after a swap
	p.Tick(context.Background())
	p.Tick(context.Background())
	if got := n.reads.Takes - looks; got != 1 {
		t.Fatalf("%d looks over two ticks after a reload, want 1", got)
	}
}

// The last blocks of a working set on a large cache: fewer misses than a
// share of the cache's blocks (worthABatch), so a reading volume keeps
// collecting them, but once its reads pause they are promoted, however
// large the cache.
func TestPromoterPromotesASmallBatchOnceTheReadsPause(t *testing.T) {
	n, name, p := warmPromoterNode(t)
	n.dm.StatusOverride[name] = status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	small := uint64(40) // 16,384 blocks: a batch is worth 128 misses while the volume reads
	n.miss(name, 1000, small)
	n.dm.StatusOverride[name] = status(0, small, 0, "rw -")
	for i := range uint64(3) {
		n.clock.Step(promoteBusyWait) // past every wait a busy volume has
		p.Tick(context.Background())
		n.miss(name, 1000, 1) // still reading (a block already in the batch)
		n.dm.StatusOverride[name] = status(0, small+1+i, 0, "rw -")
	}
	if promotions(n) != 0 {
		t.Fatalf("copies %v: promoted %d misses while the volume read, fewer than a batch is worth", n.dev.Copied, small)
	}
	p.Tick(context.Background()) // the last read
	if promotions(n) != 0 {
		t.Fatalf("copies %v: promoted while the volume read", n.dev.Copied)
	}
	p.Tick(context.Background()) // no miss since the last look: the reads paused
	md, _ := n.meta.Get("/dev/nvme/" + vol + ".cache-meta")
	if promotions(n) != 1 || uint64(len(md.Mappings)) != small {
		t.Fatalf("after the reads paused: %d promotions, %d blocks mapped; want 1 and %d", promotions(n), len(md.Mappings), small)
	}
}

// A promotion whose copy waits on a cache device that stopped answering
// holds up only its own volume: another volume's batch is promoted
// meanwhile, and the hung one's result is taken once its device answers.
func TestAPromotionThatHangsHoldsUpNoOtherVolume(t *testing.T) {
	n, name, _ := warmPromoterNode(t)
	p := NewPromoter(n.engine, n.locks, n.metrics, n.clock, 20*time.Millisecond, nil)
	const other = "pvc-2"
	if _, err := n.lvm.CreateLV(context.Background(), "hdd", other, 10*gib, lvm.Tags(other, lvm.RoleOrigin)); err != nil {
		t.Fatal(err)
	}
	n.stageVolume(t, other, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache, Warm: true})
	n.meta.Put("/dev/nvme/"+other+".cache-meta", dm.CacheMetadata{BlockSectors: 128, CacheBlocks: gib / (128 * 512), Policy: "smq"})
	otherName := cache.DeviceName(other)
	answer := make(chan struct{})
	n.dev.Hung = map[string]chan struct{}{"/dev/nvme/" + vol + ".cache-data": answer}
	defer func() {
		if answer != nil {
			close(answer)
		}
	}()

	n.dm.StatusOverride[name], n.dm.StatusOverride[otherName] = status(0, 0, 0, "rw -"), status(0, 0, 0, "rw -")
	p.Tick(context.Background())
	n.miss(name, 0, 20)
	n.dm.StatusOverride[name] = status(0, 500, 0, "rw -")
	p.Tick(context.Background())
	p.Tick(context.Background()) // the reads paused: the promotion starts, and hangs
	if _, hung := p.jobs.inFlight(vol); !hung {
		t.Fatalf("no promotion of %s in flight: copies %v", vol, n.dev.Copied)
	}
	n.miss(otherName, 0, 20)
	n.dm.SetStatus(otherName, status(0, 500, 0, "rw -")) // the hung promotion reads statuses too
	p.Tick(context.Background())
	p.Tick(context.Background())
	md, _ := n.meta.Get("/dev/nvme/" + other + ".cache-meta")
	if len(md.Mappings) != 20 {
		t.Fatalf("with %s's promotion hung, %s has %d blocks mapped, want 20: copies %v", vol, other, len(md.Mappings), n.dev.Copied)
	}

	close(answer)
	answer = nil
	for range 100 {
		if _, hung := p.jobs.inFlight(vol); !hung {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Tick(context.Background())
	if md, _ := n.meta.Get("/dev/nvme/" + vol + ".cache-meta"); len(md.Mappings) != 20 {
		t.Fatalf("once its device answered, %s has %d blocks mapped, want 20", vol, len(md.Mappings))
	}
}
