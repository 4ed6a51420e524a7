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

	mu   sync.Mutex
	head int64
	busy time.Duration // total modelled service time, for statistics
	ops  int64
}

// NewActuator returns an actuator with its head at offset 0.
func NewActuator(params Params, clock Clock) (*Actuator, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	return &Actuator{params: params, clock: clock}, nil
}

// Do runs io (the real read or write on the backing store) as a request of
// length bytes at offset, and returns once the modelled service time has
// elapsed. Only one request is in service at a time.
func (a *Actuator) Do(offset, length int64, io func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := a.clock.Now()
	service, head := a.params.ServiceTime(a.head, offset, length)
	err := io()
	if rest := service - a.clock.Now().Sub(start); rest > 0 {
		a.clock.Sleep(rest)
	}
	a.head = head
	a.busy += service
	a.ops++
	return err
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
