package model

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const gib = int64(1) << 30

func TestSeekGrowsWithSquareRootOfDistance(t *testing.T) {
	p := Defaults(4 * gib)
	quarter := p.Settle + (p.FullStroke-p.Settle)/2 // sqrt(1/4) = 1/2
	for _, tc := range []struct {
		distance int64
		min, max time.Duration
	}{
		{0, 0, 0},
		{4096, p.Settle, p.Settle + time.Millisecond/10}, // just above settle
		{p.Capacity / 4, quarter - time.Microsecond, quarter + time.Microsecond},
		{-p.Capacity / 4, quarter - time.Microsecond, quarter + time.Microsecond}, // either direction
		{p.Capacity, p.FullStroke, p.FullStroke},
		{10 * p.Capacity, p.FullStroke, p.FullStroke}, // capped
	} {
		if got := p.SeekTime(tc.distance); got < tc.min || got > tc.max {
			t.Errorf("SeekTime(%d) = %v, want %v to %v", tc.distance, got, tc.min, tc.max)
		}
	}
}

func TestServiceTimeCases(t *testing.T) {
	p := Defaults(4 * gib)
	rot := 60 * time.Second / 7200 / 2
	if p.RotationTime() != rot {
		t.Fatalf("RotationTime() = %v, want %v", p.RotationTime(), rot)
	}
	mib := int64(1 << 20)
	cases := []struct {
		name              string
		head, off, length int64
		want              time.Duration
	}{
		{"sequential streams at media rate", 10 * mib, 10 * mib, mib, p.TransferTime(mib)},
		{"small gap ahead waits for the platter", 0, 64 << 10, 4096, p.TransferTime(64<<10) + p.TransferTime(4096)},
		{"backwards pays seek and rotation", 10 * mib, 0, 4096, p.SeekTime(10*mib) + rot + p.TransferTime(4096)},
		{"far ahead pays seek and rotation", 0, 2 * gib, 4096, p.SeekTime(2*gib) + rot + p.TransferTime(4096)},
	}
	for _, c := range cases {
		got, head := p.ServiceTime(c.head, c.off, c.length)
		if got != c.want || head != c.off+c.length {
			t.Errorf("%s: ServiceTime(%d,%d,%d) = %v, head %d; want %v, head %d",
				c.name, c.head, c.off, c.length, got, head, c.want, c.off+c.length)
		}
	}
}

// The defaults must land in the brief's envelope: ~250 MB/s sequential and
// 100-200 random 4 KiB IOPS at queue depth 1 over the whole disk.
func TestDefaultsMatchTargetEnvelope(t *testing.T) {
	p := Defaults(4 * gib)
	seq := 0.0
	head := int64(0)
	for i := 0; i < 64; i++ {
		d, h := p.ServiceTime(head, head, 1<<20)
		seq += d.Seconds()
		head = h
	}
	if mbps := 64 * float64(1<<20) / seq / 1e6; math.Abs(mbps-250) > 1 {
		t.Fatalf("sequential 1 MiB rate = %.1f MB/s, want 250", mbps)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	total := 0.0
	const n = 20000
	for i := 0; i < n; i++ {
		off := rng.Int64N(p.Capacity/4096) * 4096
		d, h := p.ServiceTime(head, off, 4096)
		total += d.Seconds()
		head = h
	}
	if iops := n / total; iops < 100 || iops > 200 {
		t.Fatalf("random 4 KiB QD1 = %.0f IOPS, want 100-200", iops)
	}
}
