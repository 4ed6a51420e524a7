// Package readtrackfake is an in-memory readtrack.Interface for tests:
// Miss stands for a read that a tracked device's cache sent to its origin.
package readtrackfake

import (
	"context"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

// Tracker records misses in memory.
type Tracker struct {
	mu      sync.Mutex
	tracked map[string]*volume
	// Takes counts Take calls.
	Takes int
	// TrackErr, when set, is what Track returns.
	TrackErr error
}

type volume struct {
	readtrack.Volume
	missed map[uint64]bool
}

// New returns a tracker that tracks nothing yet.
func New() *Tracker { return &Tracker{tracked: map[string]*volume{}} }

func (t *Tracker) Track(_ context.Context, name string, v readtrack.Volume) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.TrackErr != nil {
		return t.TrackErr
	}
	if old, ok := t.tracked[name]; ok && old.Volume == v {
		return nil
	}
	t.tracked[name] = &volume{Volume: v, missed: map[uint64]bool{}}
	return nil
}

func (t *Tracker) Take(_ context.Context, name string) ([]uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Takes++
	v, ok := t.tracked[name]
	if !ok {
		return nil, readtrack.ErrNotTracked
	}
	var blocks []uint64
	for b := range v.missed {
		if len(blocks) == readtrack.MaxBlocksPerTake {
			break
		}
		blocks = append(blocks, b)
		delete(v.missed, b)
	}
	return blocks, nil
}

func (t *Tracker) Untrack(_ context.Context, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tracked, name)
	return nil
}

// Miss stands for a read of sector that name's cache missed: a tracked
// device records the origin block it falls in.
func (t *Tracker) Miss(name string, sector uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.tracked[name]; ok {
		v.missed[sector/v.BlockSectors] = true
	}
}

// Tracking returns what name is tracked with, and false when it is not.
func (t *Tracker) Tracking(name string) (readtrack.Volume, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.tracked[name]
	if !ok {
		return readtrack.Volume{}, false
	}
	return v.Volume, true
}
