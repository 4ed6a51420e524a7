package bench

import (
	"context"
	"errors"
)

// Counters are dm-cache's statistics for one device, as `dmsetup status` prints
// them. The kernel keeps them as 32-bit values that wrap.
type Counters struct {
	ReadHits    uint64 `json:"readHits"`
	ReadMisses  uint64 `json:"readMisses"`
	WriteHits   uint64 `json:"writeHits"`
	WriteMisses uint64 `json:"writeMisses"`
	Demotions   uint64 `json:"demotions"`
	Promotions  uint64 `json:"promotions"`
}

// CacheCounters samples the dm-cache counters of a device (a dm name or
// /dev/mapper path). Implementations must not commit metadata while reading
// (dmsetup status --noflush), so sampling does not disturb the measurement.
type CacheCounters interface {
	Sample(ctx context.Context, device string) (Counters, error)
}

// ErrNoCacheTable is what a CacheCounters returns while the device has no
// cache table: ssdcache's promoter swaps a cache out for seconds at a time,
// and a cache may be detached. The test then has no counters.
var ErrNoCacheTable = errors.New("the device has no cache table now")

// Delta returns after-before for each counter, treating each as a 32-bit
// counter that may have wrapped once in between, or restarted: a table load
// (a promotion's swap) starts dm-cache's counters again from zero.
func Delta(before, after Counters) Counters {
	return Counters{
		ReadHits:    delta32(before.ReadHits, after.ReadHits),
		ReadMisses:  delta32(before.ReadMisses, after.ReadMisses),
		WriteHits:   delta32(before.WriteHits, after.WriteHits),
		WriteMisses: delta32(before.WriteMisses, after.WriteMisses),
		Demotions:   delta32(before.Demotions, after.Demotions),
		Promotions:  delta32(before.Promotions, after.Promotions),
	}
}

// delta32: an after below a before that was far from wrapping is a
// restart, and after alone is what was counted since; the reads before the
// restart are lost, so such a delta undercounts.
func delta32(before, after uint64) uint64 {
	if after < before && before < 1<<31 {
		return after
	}
	return uint64(uint32(after) - uint32(before))
}

// ReadHitRatio is hits/(hits+misses) for reads, and false when no read was counted.
func (c Counters) ReadHitRatio() (float64, bool) {
	return ratio(c.ReadHits, c.ReadMisses)
}

// WriteHitRatio is hits/(hits+misses) for writes, and false when no write was counted.
func (c Counters) WriteHitRatio() (float64, bool) {
	return ratio(c.WriteHits, c.WriteMisses)
}

func ratio(hits, misses uint64) (float64, bool) {
	if hits+misses == 0 {
		return 0, false
	}
	return float64(hits) / float64(hits+misses), true
}
