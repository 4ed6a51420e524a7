package agent

import (
	"sync"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Sample is one reading of a cached volume's dm-cache status.
type Sample struct {
	Status dm.CacheStatus
	Time   time.Time
}

// RecentHitWindow is how many sample intervals the recent hit ratio spans:
// six of the default ten seconds, a minute, short enough to follow a cache
// converging and long enough to hold more than a burst.
const RecentHitWindow = 6

// Samples holds the last RecentHitWindow+1 readings per volume and the
// volumes whose cache was dropped for failing, shared by Monitor (writer) and
// the reconciler.
type Samples struct {
	mu      sync.Mutex
	recent  map[string][]Sample // oldest first
	dropped map[string]string   // volume -> why
}

// NewSamples returns an empty store.
func NewSamples() *Samples {
	return &Samples{recent: map[string][]Sample{}, dropped: map[string]string{}}
}

func (s *Samples) put(volumeID string, sample Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := append(s.recent[volumeID], sample)
	if len(h) > RecentHitWindow+1 {
		h = h[len(h)-RecentHitWindow-1:]
	}
	s.recent[volumeID] = h
}

// Latest returns the newest sample of volumeID.
func (s *Samples) Latest(volumeID string) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.recent[volumeID]
	if len(h) == 0 {
		return Sample{}, false
	}
	return h[len(h)-1], true
}

// RecentReads are the read hits and misses between the oldest and the newest
// sample kept, summed interval by interval as the metrics are (32-bit
// counters that wrap); ok is false before two samples exist.
func (s *Samples) RecentReads(volumeID string) (hits, misses uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.recent[volumeID]
	for i := 1; i < len(h); i++ {
		if h[i-1].Status.Failed || h[i].Status.Failed {
			continue // a failed status carries no counters
		}
		hits += dm.Delta32(h[i-1].Status.ReadHits, h[i].Status.ReadHits)
		misses += dm.Delta32(h[i-1].Status.ReadMisses, h[i].Status.ReadMisses)
	}
	return hits, misses, len(h) > 1
}

func (s *Samples) forget(volumeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recent, volumeID)
}

func (s *Samples) markDropped(volumeID, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped[volumeID] = why
}

// Dropped says whether volumeID's cache was dropped for failing, and why.
func (s *Samples) Dropped(volumeID string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	why, ok := s.dropped[volumeID]
	return why, ok
}

// ClearDropped forgets a failure, so the next attach may try again.
func (s *Samples) ClearDropped(volumeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.dropped, volumeID)
}
