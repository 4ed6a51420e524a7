package model

import (
	"math/rand/v2"
	"testing"
	"time"
)

const gib = int64(1) << 30

// TestDefaults pins the drive that sets make bench's HDD reference: 250 MB/s
// streaming, 4.17 ms average rotation, seeks from 0.5 ms (settle) to 6 ms
// (full stroke) along a square root, and a short gap ahead waited out, not
// sought.
func TestDefaults(t *testing.T) {
	p := Defaults(4 * gib)
	const rot, xfer4k = 4166666 * time.Nanosecond, 16384 * time.Nanosecond
	for _, c := range []struct {
		name              string
		head, off, length int64
		want              time.Duration
	}{
		{"sequential 1 MiB streams at media rate", 10 << 20, 10 << 20, 1 << 20, 4194304 * time.Nanosecond},
		{"64 KiB ahead waits for the platter", 0, 64 << 10, 4096, 262144*time.Nanosecond + xfer4k},
		{"a quarter of the disk back", gib, 0, 4096, 3250*time.Microsecond + rot + xfer4k}, // settle + (stroke-settle)*sqrt(1/4)
		{"full stroke", 0, 4 * gib, 4096, 6*time.Millisecond + rot + xfer4k},
		{"beyond the capacity is capped", 0, 40 * gib, 4096, 6*time.Millisecond + rot + xfer4k},
	} {
		got, head := p.ServiceTime(c.head, c.off, c.length)
		if got != c.want || head != c.off+c.length {
			t.Errorf("%s: ServiceTime(%d, %d, %d) = %v, head %d; want %v, head %d",
				c.name, c.head, c.off, c.length, got, head, c.want, c.off+c.length)
		}
	}
	// Over the whole disk, random 4 KiB reads at queue depth 1 land where a
	// 7200 rpm disk's do.
	rng := rand.New(rand.NewPCG(1, 2))
	var total time.Duration
	head := int64(0)
	const n = 20000
	for range n {
		d, h := p.ServiceTime(head, rng.Int64N(p.Capacity/4096)*4096, 4096)
		total, head = total+d, h
	}
	if iops := n / total.Seconds(); iops < 100 || iops > 200 {
		t.Errorf("random 4 KiB QD1 = %.0f IOPS, want 100-200", iops)
	}
}
