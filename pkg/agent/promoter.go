package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// DefaultPromoteInterval is how often the blocks read on warm caches are
// looked at: a promotion starts within two intervals of the reads that
// brought its blocks going quiet. A look is two ioctls per volume.
const DefaultPromoteInterval = 500 * time.Millisecond

// Promoter promotes the blocks read on each volume whose cache warms up
// (cache.Engine.Promote), when some of those reads missed and the cache
// has free blocks: a second pass over new data then reads from the SSD,
// where dm-cache's smq alone needs four to six. Meanwhile the cache runs
// smq's cleaner variant, which promotes nothing (cache.PolicyFilling); a
// full cache is handed over to smq, which replaces blocks by use.
//
// A promotion reads its blocks from the HDD a second time (dm-cache, too,
// copies a promoted block from the origin), so it runs when the volume's
// reads pause: then it costs the application nothing. A volume that keeps
// reading gets its batches anyway, paced so that they take at most a fifth
// of its time.
type Promoter struct {
	engine   *cache.Engine
	locks    *cache.VolumeLocks
	metrics  *Metrics
	clock    clock.WithTicker
	interval time.Duration
	// cacheLost is told about a cache a failed promotion could not load back.
	cacheLost func(volumeID, why string)
	// reads are what each volume read since its last promotion; only
	// Tick's goroutine touches them.
	reads map[string]*recentReads
	// jobs are the promotions and hand-overs in flight, one per volume at
	// most and maxPromotions in all: a promotion copies for minutes, and
	// one into a device that stopped answering waits where no signal
	// reaches (an O_DIRECT write), so each runs in a goroutine of its own
	// and holds up only its volume.
	jobs *volumeWork[batchResult]
}

// maxPromotions bounds the promotions and hand-overs running at once on a
// node: each reads the HDD that the applications read too.
const maxPromotions = 2

// batchResult is what a promotion or hand-over in flight reports to the
// tick that takes it.
type batchResult struct {
	// ran is false when the volume was busy: blocks are the batch, to try
	// again, and missed the misses it counted.
	ran    bool
	blocks []uint64
	missed uint64
	start  time.Time
	took   time.Duration
	report cache.WarmReport
	left   []uint64
	err    error
	// handOver is set for a hand-over, which leaves the reads alone.
	handOver bool
}

type recentReads struct {
	// blocks were read and are not known to be in the cache (NotHeld).
	blocks map[uint64]struct{}
	// misses is the cache's read-miss counter at the last tick; missed is
	// how much it grew since the batch began.
	misses, missed uint64
	// busySince is when the volume's reads last stopped pausing (zero
	// while they pause); notBefore paces promotions after the last one.
	// A busy volume gets a batch once it has been busy promoteBusyWait and
	// promoteIdleFactor times as long as the last promotion took.
	busySince, notBefore time.Time
	// afterBatch is set when the last promotion mapped a batch worth its
	// swaps: the reads made while it ran were counted by a table it
	// replaced, whose counters are gone, and likely touched more new data.
	afterBatch bool
	// reloaded is set when the last promotion may have loaded the table
	// again (it mapped blocks, or failed): the miss counter restarted, so
	// the next tick looks at the reads whatever the counter says. Every
	// promotion that sets afterBatch sets it too.
	reloaded bool
}

// Pacing: a batch holds at least MinPromoteBlocks blocks (a volume that
// mostly writes misses often on few blocks read) and, unless the reads
// paused, is worth a share of the cache (worthABatch).
const (
	promoteMissesShare = 128
	promoteIdleFactor  = 4
	// promoteBusyWait is how long a first pass over new data reads alone
	// before a promotion competes with it for the HDD.
	promoteBusyWait = 10 * time.Second
)

// MinPromoteBlocks is the smallest batch worth a promotion's two table
// swaps; a cache with room for fewer is full and handed over to smq.
const MinPromoteBlocks = 16

// NewPromoter returns a promoter; Start runs it. A zero interval takes the
// default; cacheLost (Monitor.CacheLost) may be nil.
func NewPromoter(e *cache.Engine, locks *cache.VolumeLocks, m *Metrics, c clock.WithTicker, interval time.Duration, cacheLost func(volumeID, why string)) *Promoter {
	if c == nil {
		c = clock.RealClock{}
	}
	if interval <= 0 {
		interval = DefaultPromoteInterval
	}
	if cacheLost == nil {
		cacheLost = func(string, string) {}
	}
	return &Promoter{engine: e, locks: locks, metrics: m, clock: c, interval: interval, cacheLost: cacheLost,
		reads: map[string]*recentReads{}, jobs: newVolumeWork[batchResult]()}
}

// Start promotes until ctx ends; it is a controller-runtime Runnable.
func (p *Promoter) Start(ctx context.Context) error {
	ticker := p.clock.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			p.Tick(ctx)
		}
	}
}

// Tick collects the reads of every staged volume and starts the batches
// due. It waits up to one interval for the batches it started, so that a
// quick promotion's result is taken at once; a longer one is taken by a
// later tick, and its volume's reads wait for it meanwhile.
func (p *Promoter) Tick(ctx context.Context) {
	states, err := p.engine.Health(ctx)
	if err != nil {
		klog.ErrorS(err, "Reading the state of staged volumes")
		return
	}
	var started []*volumeJob[batchResult]
	for id, st := range states {
		p.takeFinished(id)
		if _, busy := p.jobs.inFlight(id); busy {
			continue
		}
		if st.Status == nil || !st.Status.Usable() {
			delete(p.reads, id)
			continue
		}
		if j := p.collect(ctx, id, st); j != nil {
			started = append(started, j)
		}
	}
	waitAll(started, p.interval)
	for id := range p.reads {
		p.takeFinished(id)
		if _, staged := states[id]; !staged {
			if _, busy := p.jobs.inFlight(id); !busy {
				delete(p.reads, id)
			}
		}
	}
	// A hand-over's result, or a batch's of a volume unstaged meanwhile, has
	// no reads to go into: forget it, as the monitor forgets its jobs'.
	p.jobs.forget(func(id string) bool { _, staged := states[id]; return staged })
}

// collect adds a volume's new misses to its batch and starts the batch's
// promotion (the job returned) when it is worth it and the cache has room.
func (p *Promoter) collect(ctx context.Context, id string, st cache.State) *volumeJob[batchResult] {
	if r, known := p.reads[id]; known {
		if !r.reloaded && st.Status.ReadMisses == r.misses {
			// No read went to the origin since the last look: a warm
			// volume costs a status read per tick, not a look at its misses.
			return p.add(ctx, id, nil, *st.Status)
		}
		r.reloaded = false
	}
	missed, tracked, err := p.engine.ReadBlocks(ctx, id, st.Table)
	if err != nil || !tracked {
		if err != nil {
			klog.V(2).InfoS("Reading the blocks missed", "volumeID", id, "err", err)
		}
		delete(p.reads, id)
		if err == nil {
			return p.handOver(ctx, id, *st.Status, "its misses are not recorded")
		}
		return nil
	}
	return p.add(ctx, id, missed, *st.Status)
}

// add counts a tick's misses (origin blocks the cache does not hold) into
// the volume's batch, and promotes the batch when it is worth it and the
// volume's reads paused or its pacing allows. Any miss makes the volume
// busy, however few: an application reading small files keeps the HDD
// seeking at a few MB/s (udev's probe after each table reload reads a few
// blocks at the device's end and delays the next batch by one look). The
// batch holds at most as many blocks as the cache has free: the
// promoter's memory follows the cache's size, not the volume's.
func (p *Promoter) add(ctx context.Context, id string, missed []uint64, st dm.CacheStatus) *volumeJob[batchResult] {
	r, known := p.reads[id]
	if !known {
		// Reads before the first look may have missed: Promote skips what is mapped.
		r = &recentReads{blocks: map[uint64]struct{}{}, missed: st.ReadMisses}
		p.reads[id] = r
	} else if st.ReadMisses >= r.misses {
		r.missed += st.ReadMisses - r.misses
	} else {
		r.missed += st.ReadMisses // the cache table was loaded again: its counters restarted
	}
	r.misses = st.ReadMisses
	if r.afterBatch {
		r.missed += uint64(len(missed))
		r.afterBatch = false
	}
	now, busy := p.clock.Now(), len(missed) > 0
	switch {
	case !busy:
		r.busySince = time.Time{}
	case r.busySince.IsZero():
		r.busySince = now
	}
	free := st.CacheTotal - min(st.CacheUsed, st.CacheTotal)
	for _, b := range missed {
		if uint64(len(r.blocks)) >= free {
			break // the rest is for a later batch, if room is left
		}
		r.blocks[b] = struct{}{}
	}
	switch {
	case st.CacheUsed+MinPromoteBlocks > st.CacheTotal:
		// Room for fewer blocks than a batch is worth is full: blocks
		// written while a promotion ran are left out of it, and nothing
		// else would fill the last few (smq's cleaner maps nothing).
		r.blocks, r.missed = map[uint64]struct{}{}, 0
		return p.handOver(ctx, id, st, "the cache is full")
	case len(r.blocks) > 0 && r.missed == 0:
		r.blocks, r.missed = map[uint64]struct{}{}, 0 // every read hit
	case len(r.blocks) < MinPromoteBlocks:
		// keep collecting
	case busy && (r.missed < worthABatch(st) || now.Before(r.busySince.Add(promoteBusyWait)) || now.Before(r.notBefore)):
		// the application is reading: leave the HDD to it for now
	case !busy && r.missed < worthABatch(st) && now.Before(r.notBefore):
		// a small batch waits for its pacing even while the reads pause
	default:
		return p.promote(ctx, id, r, st)
	}
	return nil
}

// worthABatch is how many misses make a batch worth promoting while the
// volume reads, or at once after a promotion: a share of the cache's
// blocks, since every batch writes all the cache's mappings again and
// loads its table. Once the reads pause, a smaller batch (at least
// MinPromoteBlocks) is promoted too, paced like a busy volume's: the last
// blocks of a working set would otherwise never reach the cache of a
// large cache, whose share is more than they missed.
func worthABatch(st dm.CacheStatus) uint64 {
	return max(MinPromoteBlocks, st.CacheTotal/promoteMissesShare)
}

// handOver starts letting smq replace the blocks of a cache the promoter
// no longer fills (cache.Engine.HandOver); a busy volume is handed over at
// a later tick.
func (p *Promoter) handOver(ctx context.Context, id string, st dm.CacheStatus, why string) *volumeJob[batchResult] {
	if st.Policy != cache.PolicyFilling || p.jobs.inFlightCount() >= maxPromotions {
		return nil
	}
	return p.jobs.start(id, p.clock.Now(), func(*volumeJob[batchResult]) batchResult {
		if !p.locks.TryAcquire(id) {
			return batchResult{handOver: true}
		}
		defer p.locks.Release(id)
		if err := p.engine.HandOver(ctx, id); err != nil {
			klog.ErrorS(err, "Handing the cache over to smq", "volumeID", id)
			return batchResult{handOver: true, ran: true, err: err}
		}
		klog.InfoS("Handed the cache over to smq, which replaces blocks by use", "volumeID", id, "reason", why)
		return batchResult{handOver: true, ran: true}
	})
}

// promote starts one promotion of the volume's batch, under its lock, in a
// job of its own; a busy volume keeps its batch for a later tick, and so
// does a node already running maxPromotions.
func (p *Promoter) promote(ctx context.Context, id string, r *recentReads, st dm.CacheStatus) *volumeJob[batchResult] {
	if p.jobs.inFlightCount() >= maxPromotions {
		return nil
	}
	blocks := make([]uint64, 0, len(r.blocks))
	for b := range r.blocks {
		blocks = append(blocks, b)
	}
	missed := r.missed
	r.blocks, r.missed = map[uint64]struct{}{}, 0
	timeout := cache.BatchTimeout(st.CacheTotal * st.BlockSectors * dm.SectorSize)
	return p.jobs.start(id, p.clock.Now(), func(*volumeJob[batchResult]) batchResult {
		// Once begun, a promotion finishes on a context of its own (SIGTERM
		// in a rollout must not leave the volume on its linear table), but
		// the drop of a failing cache stops its copy into the cache (Yield).
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		if !p.locks.TryAcquireYielding(id, cancel) {
			return batchResult{blocks: blocks, missed: missed}
		}
		defer p.locks.Release(id)
		klog.V(2).InfoS("Promoting the blocks read", "volumeID", id, "read", len(blocks))
		res := batchResult{ran: true, blocks: blocks, start: p.clock.Now()}
		res.report, res.left, res.err = p.engine.Promote(pctx, id, blocks)
		res.took = p.clock.Since(res.start)
		return res
	})
}

// takeFinished takes the volume's promotion or hand-over that ended, if
// any, into its reads: pacing, what it left for the next batch, and what
// the log, the metrics and the monitor are told.
func (p *Promoter) takeFinished(id string) {
	res, done := p.jobs.take(id)
	r, known := p.reads[id]
	if !done || res.handOver || !known {
		return
	}
	if !res.ran {
		for _, b := range res.blocks {
			r.blocks[b] = struct{}{} // the volume was busy: the same batch next time
		}
		r.missed += res.missed
		return
	}
	r.notBefore = res.start.Add(res.took * (1 + promoteIdleFactor))
	r.afterBatch = res.err == nil && res.report.Blocks >= MinPromoteBlocks
	r.reloaded = res.err != nil || res.report.Blocks > 0
	// What one promotion could not hold is the next batch: known misses.
	for _, b := range res.left {
		r.blocks[b] = struct{}{}
	}
	r.missed += uint64(len(res.left))
	if res.err != nil {
		klog.ErrorS(res.err, "Promoting the blocks read", "volumeID", id, "blocks", len(res.blocks))
		if errors.Is(res.err, cache.ErrCacheLeftOut) {
			p.cacheLost(id, "a promotion could not load the cache again: "+res.err.Error())
		}
		return
	}
	if res.report.Blocks > 0 && p.metrics != nil {
		p.metrics.add(p.metrics.batchPromoted, id, float64(res.report.Blocks))
	}
	w := res.report
	klog.InfoS("Promoted the blocks read", "volumeID", id, "read", len(res.blocks), "promoted", w.Blocks, "kept", w.Kept,
		"writtenMeanwhile", w.Dropped, "left", len(res.left), "duration", res.took, "uncached", w.Uncached, "suspended", w.Suspended,
		"copiedWhileServing", w.CopiedWhileServing)
}
