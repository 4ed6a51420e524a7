package agent

import (
	"sync"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// volumeWork runs work on volumes in goroutines of their own, at most one
// per volume at a time. A call that blocks in the kernel (a read of a cache
// device that never answers, a suspend waiting on its metadata commit)
// then holds up only its own volume: it is not started again while it
// runs, and the monitor goes on with every other volume.
type volumeWork[T any] struct {
	mu      sync.Mutex
	running map[string]*volumeJob[T]
	// finished is each volume's latest result not yet taken.
	finished map[string]T
}

// volumeJob is one call in flight.
type volumeJob[T any] struct {
	started time.Time
	done    chan struct{}
	// progress is what the call reports while it runs.
	progress progress
}

// progress is what a running check has seen so far, shared with the tick
// that may find it stuck.
type progress struct {
	mu sync.Mutex
	// waitingSince is when the device read in progress began (zero
	// between reads), what says which read it is.
	waitingSince time.Time
	what         string
	// table is the live table the call read, once it has (tableRead).
	table     dm.Table
	tableRead bool
}

// reading records that a read of the device (what) begins at now.
func (p *progress) reading(what string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitingSince, p.what = now, what
}

// answered records that the read in progress returned.
func (p *progress) answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waitingSince, p.what = time.Time{}, ""
}

func (p *progress) sawTable(t dm.Table) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.table, p.tableRead = t, true
}

// waiting says since when, and on which read, the call waits for the
// device (ok false between reads), and the table it read.
func (p *progress) waiting() (since time.Time, what string, table dm.Table, tableRead, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitingSince, p.what, p.table, p.tableRead, !p.waitingSince.IsZero()
}

func newVolumeWork[T any]() *volumeWork[T] {
	return &volumeWork[T]{running: map[string]*volumeJob[T]{}, finished: map[string]T{}}
}

// start runs call for id in a goroutine unless one is in flight, and
// returns the job it started (nil if one was in flight).
func (w *volumeWork[T]) start(id string, now time.Time, call func(*volumeJob[T]) T) *volumeJob[T] {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, busy := w.running[id]; busy {
		return nil
	}
	j := &volumeJob[T]{started: now, done: make(chan struct{})}
	w.running[id] = j
	go func() {
		res := call(j)
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.running, id)
		w.finished[id] = res
		close(j.done)
	}()
	return j
}

// inFlightCount is how many jobs are in flight, over all volumes.
func (w *volumeWork[T]) inFlightCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// inFlight returns id's job in flight, if any.
func (w *volumeWork[T]) inFlight(id string) (*volumeJob[T], bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j, ok := w.running[id]
	return j, ok
}

// take returns and forgets id's latest finished result.
func (w *volumeWork[T]) take(id string) (T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res, ok := w.finished[id]
	delete(w.finished, id)
	return res, ok
}

// forget drops the results of volumes keep rejects (unstaged ones).
func (w *volumeWork[T]) forget(keep func(id string) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.finished {
		if !keep(id) {
			delete(w.finished, id)
		}
	}
}

// waitAll waits until every job in jobs is done or d has passed (real
// time: the tick's own budget, whatever clock the monitor reads).
func waitAll[T any](jobs []*volumeJob[T], d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for _, j := range jobs {
		select {
		case <-j.done:
		case <-timer.C:
			return
		}
	}
}
