package model

import (
	"sync"
	"time"
)

// Clock is the time source an Actuator waits on; tests pass a fake.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

// Actuator serves requests one at a time, as a drive with a single head does:
// a request starts when the previous one has finished, and it completes no
// sooner than the model's service time after it started.
type Actuator struct {
	params Params
	clock  Clock

	mu     sync.Mutex
	head   int64
	finish time.Time     // modelled completion of the last request
	busy   time.Duration // total modelled service time, for statistics
	ops    int64
}

// NewActuator returns an actuator with its head at offset 0.
func NewActuator(params Params, clock Clock) *Actuator {
	return &Actuator{params: params, clock: clock}
}

// Now is the actuator's clock, used to stamp request arrival.
func (a *Actuator) Now() time.Time { return a.clock.Now() }

// Do runs io (the real read or write on the backing store) as a request of
// length bytes at offset that arrived at arrival, and returns at the
// request's modelled completion: service starts when the request has arrived
// and the previous one has completed, so queued requests are served back to
// back and host overhead between them is hidden, as a drive's queue would.
// Only one request is in service at a time.
func (a *Actuator) Do(arrival time.Time, offset, length int64, io func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := arrival
	if a.finish.After(start) {
		start = a.finish
	}
	service, head := a.params.ServiceTime(a.head, offset, length)
	err := io()
	finish := start.Add(service)
	if now := a.clock.Now(); now.After(finish) {
		// The host's I/O was slower than the model: the next request must
		// not be served early to make up for it.
		finish = now
	} else {
		// Oversleeping is not carried into finish, so the next queued
		// request absorbs it instead of every request adding it.
		a.clock.Sleep(finish.Sub(now))
	}
	a.finish = finish
	a.head = head
	a.busy += service
	a.ops++
	return err
}

// Access is a queued media access, as Next sees it.
type Access struct {
	Offset, Length int64
	Arrival        time.Time
}

// MaxQueueWait bounds how long Next lets a queued access be passed over, as
// a drive's firmware ages its command queue so that no command starves.
const MaxQueueWait = 100 * time.Millisecond

// Next picks which of the queued accesses (in arrival order) the drive
// serves next, as a drive with a command queue (SATA NCQ, SAS TCQ) does:
// the one the head reaches soonest, unless the oldest has waited
// MaxQueueWait. Served in arrival order instead, the pieces of concurrent
// streams (a 1 MiB read split into cache blocks by device-mapper, eight in
// flight) would seek back and forth as no real disk does.
func (a *Actuator) Next(queued []Access) int {
	if len(queued) == 0 || a.clock.Now().Sub(queued[0].Arrival) >= MaxQueueWait {
		return 0
	}
	a.mu.Lock()
	head := a.head
	a.mu.Unlock()
	best, bestTime := 0, time.Duration(-1)
	for i, q := range queued {
		t, _ := a.params.ServiceTime(head, q.Offset, q.Length)
		if bestTime < 0 || t < bestTime {
			best, bestTime = i, t
		}
	}
	return best
}

// Stats reports how many requests were served and their modelled busy time.
func (a *Actuator) Stats() (ops int64, busy time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ops, a.busy
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns the current time.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep pauses the calling goroutine.
func (RealClock) Sleep(d time.Duration) { time.Sleep(d) }
