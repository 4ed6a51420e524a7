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
	// yield maps a volume whose holder gives way on request to the request.
	yield map[string]func()
}

// NewVolumeLocks returns an empty lock set.
func NewVolumeLocks() *VolumeLocks {
	return &VolumeLocks{held: map[string]chan struct{}{}, yield: map[string]func(){}}
}

// TryAcquireYielding is TryAcquire for background work that gives way to
// more urgent work on the volume: Yield calls yield while the lock is held.
func (l *VolumeLocks) TryAcquireYielding(volumeID string, yield func()) bool {
	if _, ok := l.tryAcquire(volumeID); !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.yield[volumeID] = yield
	return true
}

// Yield asks the holder of volumeID's lock to give way, if it took the lock
// with TryAcquireYielding; the caller (the drop of a failing cache) tries
// again shortly.
func (l *VolumeLocks) Yield(volumeID string) {
	l.mu.Lock()
	yield := l.yield[volumeID]
	l.mu.Unlock()
	if yield != nil {
		yield()
	}
}

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
		delete(l.yield, volumeID)
	}
}
