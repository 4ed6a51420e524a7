package model

import (
	"errors"
	"slices"
	"testing"
	"time"
)

type fakeClock struct {
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time        { return c.now }
func (c *fakeClock) Sleep(d time.Duration) { c.slept = append(c.slept, d); c.now = c.now.Add(d) }

// TestActuatorSleepsUntilModelledCompletion runs requests one after another on
// a fresh actuator and checks how long Do slept after each.
func TestActuatorSleepsUntilModelledCompletion(t *testing.T) {
	p := Defaults(gib)
	rot, xfer4k, xfer1m := p.RotationTime(), p.TransferTime(4096), p.TransferTime(1<<20)
	boom := errors.New("boom")
	type req struct {
		offset, length int64
		before         time.Duration // passes on the host before the request
		queued         bool          // arrived at time 0 instead of now
		io             time.Duration // the host's real I/O takes this long...
		err            error         // ...and fails so
	}
	for _, tc := range []struct {
		name  string
		reqs  []req
		slept []time.Duration
		busy  time.Duration
	}{
		{"sleeps the remainder of the service time, then streams",
			[]req{{offset: gib / 2, length: 4096, io: time.Millisecond}, {offset: gib/2 + 4096, length: 4096}},
			[]time.Duration{p.SeekTime(gib/2) + rot + xfer4k - time.Millisecond, xfer4k},
			p.SeekTime(gib/2) + rot + 2*xfer4k},
		{"no sleep after I/O slower than the model, whose error Do returns",
			[]req{{length: 4096, io: time.Second, err: boom}}, nil, xfer4k},
		// Host overhead between queued requests (sending a reply) is hidden: the
		// second completes one transfer after the first, not after the overhead.
		{"queued requests are served back to back",
			[]req{{length: 1 << 20, queued: true}, {offset: 1 << 20, length: 1 << 20, before: time.Millisecond, queued: true}},
			[]time.Duration{xfer1m, xfer1m - time.Millisecond}, 2 * xfer1m},
		{"a request on an idle disk starts at its arrival",
			[]req{{length: 4096}, {offset: 4096, length: 4096, before: time.Second}},
			[]time.Duration{xfer4k, xfer4k}, 2 * xfer4k},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(0, 0)}
			a := NewActuator(p, clock)
			for _, r := range tc.reqs {
				clock.now = clock.now.Add(r.before)
				arrival := clock.now
				if r.queued {
					arrival = time.Unix(0, 0)
				}
				err := a.Do(arrival, r.offset, r.length, func() error { clock.now = clock.now.Add(r.io); return r.err })
				if !errors.Is(err, r.err) {
					t.Fatalf("Do() = %v, want %v", err, r.err)
				}
			}
			if !slices.Equal(clock.slept, tc.slept) {
				t.Errorf("slept %v, want %v", clock.slept, tc.slept)
			}
			if ops, busy := a.Stats(); ops != int64(len(tc.reqs)) || busy != tc.busy {
				t.Errorf("Stats() = %d, %v; want %d, %v", ops, busy, len(tc.reqs), tc.busy)
			}
		})
	}
}

func TestNextServesTheAccessTheHeadReachesSoonest(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	a := NewActuator(Defaults(gib), clock)
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
