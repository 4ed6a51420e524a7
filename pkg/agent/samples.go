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

// Samples holds the latest reading per volume and the volumes whose cache
// was dropped for failing, shared by Monitor (writer) and the reconciler.
type Samples struct {
	mu      sync.Mutex
	latest  map[string]Sample
	dropped map[string]string // volume -> why
}

// NewSamples returns an empty store.
func NewSamples() *Samples {
	return &Samples{latest: map[string]Sample{}, dropped: map[string]string{}}
}

func (s *Samples) put(volumeID string, sample Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latest[volumeID] = sample
}

// Latest returns the newest sample of volumeID.
func (s *Samples) Latest(volumeID string) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sample, ok := s.latest[volumeID]
	return sample, ok
}

func (s *Samples) forget(volumeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.latest, volumeID)
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
