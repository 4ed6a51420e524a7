package model

import (
	"errors"
	"testing"
	"time"
)

type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time        { return c.now }
func (c *fakeClock) Sleep(d time.Duration) { c.slept = append(c.slept, d); c.now = c.now.Add(d) }

func TestActuatorWaitsRemainderOfServiceTime(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	p := Defaults(gib)
	a, err := NewActuator(p, clock)
	if err != nil {
		t.Fatal(err)
	}
	ioCost := time.Millisecond
	err = a.Do(clock.now, gib/2, 4096, func() error { clock.now = clock.now.Add(ioCost); return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := p.SeekTime(gib/2) + p.RotationTime() + p.TransferTime(4096) - ioCost
	if len(clock.slept) != 1 || clock.slept[0] != want {
		t.Fatalf("slept %v, want [%v]", clock.slept, want)
	}
	// The head now sits after the request: the next one streams.
	clock.slept = nil
	if err := a.Do(clock.now, gib/2+4096, 4096, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(clock.slept) != 1 || clock.slept[0] != p.TransferTime(4096) {
		t.Fatalf("sequential follow-up slept %v, want [%v]", clock.slept, p.TransferTime(4096))
	}
	if ops, busy := a.Stats(); ops != 2 || busy != want+ioCost+p.TransferTime(4096) {
		t.Fatalf("Stats() = %d, %v", ops, busy)
	}
}

func TestActuatorDoesNotSleepWhenIOWasSlower(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	a, _ := NewActuator(Defaults(gib), clock)
	boom := errors.New("boom")
	err := a.Do(clock.now, 0, 4096, func() error { clock.now = clock.now.Add(time.Second); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do() = %v, want the I/O error", err)
	}
	if len(clock.slept) != 0 {
		t.Fatalf("slept %v after an I/O slower than the model", clock.slept)
	}
}

func TestNewActuatorRejectsBadParams(t *testing.T) {
	if _, err := NewActuator(Params{}, &fakeClock{}); err == nil {
		t.Fatal("NewActuator accepted zero params")
	}
}

func TestActuatorServesQueuedRequestsBackToBack(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	p := Defaults(gib)
	a, _ := NewActuator(p, clock)
	arrival := clock.now // both requests were queued at once
	for i := int64(0); i < 2; i++ {
		if err := a.Do(arrival, i<<20, 1<<20, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		// Host overhead between requests (e.g. sending the reply)...
		clock.now = clock.now.Add(time.Millisecond)
	}
	// ...is hidden: the second request completes one transfer after the
	// first, not one transfer after the overhead.
	first := p.SeekTime(0) + p.TransferTime(1<<20)
	want := []time.Duration{first, p.TransferTime(1<<20) - time.Millisecond}
	if len(clock.slept) != 2 || clock.slept[0] != want[0] || clock.slept[1] != want[1] {
		t.Fatalf("slept %v, want %v", clock.slept, want)
	}
}

func TestActuatorIdleRequestStartsAtArrival(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	p := Defaults(gib)
	a, _ := NewActuator(p, clock)
	_ = a.Do(clock.now, 0, 4096, func() error { return nil })
	clock.now = clock.now.Add(time.Second) // idle disk
	clock.slept = nil
	_ = a.Do(clock.now, 4096, 4096, func() error { return nil })
	if len(clock.slept) != 1 || clock.slept[0] != p.TransferTime(4096) {
		t.Fatalf("slept %v, want one transfer %v", clock.slept, p.TransferTime(4096))
	}
}

func TestNextServesTheAccessTheHeadReachesSoonest(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	a, _ := NewActuator(Defaults(gib), clock)
	// The head ends at 1 MiB; the pieces of two interleaved streams queue
	// out of order, as device-mapper's split bios reach the disk.
	if err := a.Do(clock.now, 0, 1<<20, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	queued := []Access{
		{Offset: 64 << 20, Length: 64 << 10, Arrival: clock.now},
		{Offset: 2 << 20, Length: 64 << 10, Arrival: clock.now},
		{Offset: 1 << 20, Length: 64 << 10, Arrival: clock.now},
	}
	if got := a.Next(queued); got != 2 {
		t.Fatalf("Next() = %d, want 2 (the access that starts where the head is)", got)
	}
	clock.now = clock.now.Add(MaxQueueWait)
	if got := a.Next(queued); got != 0 {
		t.Fatalf("Next() = %d once the oldest waited %v, want 0 (no access starves)", got, MaxQueueWait)
	}
}
