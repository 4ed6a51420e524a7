package agent

import (
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// DefaultPromoteInterval is how often the blocks read on warm caches are
// promoted: short enough that a second pass over new data finds most of
// the first pass's blocks in the cache, long enough that the table swaps of
// a promotion stay a small share of a busy volume's time.
const DefaultPromoteInterval = 2 * time.Second

// Promoter promotes, every interval, the blocks read since the previous
// promotion on each volume whose cache warms up (cache.Engine.Promote), when
// some of those reads missed and the cache has free blocks: a second pass
// over new data then reads from the SSD, where dm-cache's smq alone needs
// four to six. A full cache is left to smq, which replaces blocks by use.
type Promoter struct {
	engine   *cache.Engine
	locks    *cache.VolumeLocks
	metrics  *Metrics
	clock    clock.WithTicker
	interval time.Duration
	// reads are what each volume read since its last promotion.
	reads map[string]*recentReads
}

type recentReads struct {
	blocks map[uint64]struct{}
	// misses is the cache's read-miss counter at the last tick; missed is
	// set once it grew since the batch began.
	misses uint64
	missed bool
}

// NewPromoter returns a promoter; Start runs it. A zero interval takes the default.
func NewPromoter(e *cache.Engine, locks *cache.VolumeLocks, m *Metrics, c clock.WithTicker, interval time.Duration) *Promoter {
	if c == nil {
		c = clock.RealClock{}
	}
	if interval <= 0 {
		interval = DefaultPromoteInterval
	}
	return &Promoter{engine: e, locks: locks, metrics: m, clock: c, interval: interval, reads: map[string]*recentReads{}}
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

// Tick collects the reads of every staged volume and promotes the batches due.
func (p *Promoter) Tick(ctx context.Context) {
	states, err := p.engine.Health(ctx)
	if err != nil {
		klog.ErrorS(err, "Reading the state of staged volumes")
		return
	}
	for id, st := range states {
		if st.Status == nil || !st.Status.Usable() {
			delete(p.reads, id)
			continue
		}
		p.collect(ctx, id, *st.Status)
	}
	for id := range p.reads {
		if _, ok := states[id]; !ok {
			delete(p.reads, id)
		}
	}
}

// collect adds a volume's new reads to its batch and promotes the batch
// when some of them missed and the cache has room.
func (p *Promoter) collect(ctx context.Context, id string, st dm.CacheStatus) {
	blocks, tracked, err := p.engine.ReadBlocks(ctx, id)
	if err != nil || !tracked {
		if err != nil {
			klog.V(2).InfoS("Reading the blocks read", "volumeID", id, "err", err)
		}
		delete(p.reads, id)
		return
	}
	p.add(ctx, id, blocks, st)
}

func (p *Promoter) add(ctx context.Context, id string, blocks []uint64, st dm.CacheStatus) {
	r, known := p.reads[id]
	if !known {
		// Reads before the first look may have missed: Promote skips what is mapped.
		r = &recentReads{blocks: map[uint64]struct{}{}, missed: st.ReadMisses > 0}
		p.reads[id] = r
	} else if dm.Delta32(r.misses, st.ReadMisses) > 0 {
		r.missed = true
	}
	r.misses = st.ReadMisses
	for _, b := range blocks {
		r.blocks[b] = struct{}{}
	}
	switch {
	case len(r.blocks) == 0:
	case st.CacheUsed >= st.CacheTotal || !r.missed:
		r.blocks, r.missed = map[uint64]struct{}{}, false // full, or every read hit
	default:
		p.promote(ctx, id, r)
	}
}

// promote runs one promotion under the volume's lock; a busy volume keeps
// its batch for the next tick.
func (p *Promoter) promote(ctx context.Context, id string, r *recentReads) {
	if !p.locks.TryAcquire(id) {
		return
	}
	defer p.locks.Release(id)
	blocks := make([]uint64, 0, len(r.blocks))
	for b := range r.blocks {
		blocks = append(blocks, b)
	}
	r.blocks, r.missed = map[uint64]struct{}{}, false
	res, err := p.engine.Promote(ctx, id, blocks)
	if err != nil {
		klog.ErrorS(err, "Promoting the blocks read", "volumeID", id, "blocks", len(blocks))
		return
	}
	if res.Blocks > 0 && p.metrics != nil {
		p.metrics.batchPromoted.WithLabelValues(id).Add(float64(res.Blocks))
	}
	klog.InfoS("Promoted the blocks read", "volumeID", id, "read", len(blocks), "promoted", res.Blocks,
		"kept", res.Kept, "writtenMeanwhile", res.Dropped, "duration", res.Duration)
}
