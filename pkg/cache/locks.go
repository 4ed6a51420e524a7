package cache

import (
	"context"
	"sync"
)

// VolumeLocks serialises work on one volume between the CSI server and the
// node agent. TryAcquire turns a second caller away (the agent requeues);
// Acquire lets a caller wait for the holder, bounded by its context.
type VolumeLocks struct {
	mu sync.Mutex
	// held maps a locked volume to a channel closed when it is released.
	held map[string]chan struct{}
}

// NewVolumeLocks returns an empty lock set.
func NewVolumeLocks() *VolumeLocks { return &VolumeLocks{held: map[string]chan struct{}{}} }

// TryAcquire takes the lock of volumeID if it is free.
func (l *VolumeLocks) TryAcquire(volumeID string) bool {
	_, ok := l.tryAcquire(volumeID)
	return ok
}

// Acquire takes the lock of volumeID, waiting while another holds it; it
// gives up and returns false when ctx ends first.
func (l *VolumeLocks) Acquire(ctx context.Context, volumeID string) bool {
	for {
		released, ok := l.tryAcquire(volumeID)
		if ok {
			return true
		}
		select {
		case <-released:
		case <-ctx.Done():
			return false
		}
	}
}

// tryAcquire takes the lock, or returns the channel its holder closes on release.
func (l *VolumeLocks) tryAcquire(volumeID string) (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if released, busy := l.held[volumeID]; busy {
		return released, false
	}
	l.held[volumeID] = make(chan struct{})
	return nil, true
}

// Release frees the lock of volumeID.
func (l *VolumeLocks) Release(volumeID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if released, ok := l.held[volumeID]; ok {
		close(released)
		delete(l.held, volumeID)
	}
}
