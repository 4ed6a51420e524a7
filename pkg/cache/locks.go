package cache

import "sync"

// VolumeLocks serialises work on one volume between the CSI server and the
// node agent: a second caller is turned away rather than queued, so the CO
// gets Aborted and retries, and the agent requeues.
type VolumeLocks struct {
	mu   sync.Mutex
	busy map[string]bool
}

// NewVolumeLocks returns an empty lock set.
func NewVolumeLocks() *VolumeLocks { return &VolumeLocks{busy: map[string]bool{}} }

// TryAcquire takes the lock of volumeID if it is free.
func (l *VolumeLocks) TryAcquire(volumeID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[volumeID] {
		return false
	}
	l.busy[volumeID] = true
	return true
}

// Release frees the lock of volumeID.
func (l *VolumeLocks) Release(volumeID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.busy, volumeID)
}
