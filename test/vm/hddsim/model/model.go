// Package model computes how long a single-actuator hard disk takes to serve a
// request, from where its head is and where the request lies.
//
// The model is deliberately small and deterministic so that tests can check it
// exactly and benchmarks can compare runs:
//
//	service = seek(distance) + rotation + length/transferRate
//
//	seek(0)  = 0
//	seek(d)  = settle + (fullStroke-settle) * sqrt(d/capacity)
//	rotation = half a revolution (the average wait for a random sector)
//
// A request that starts exactly where the previous one ended streams on: no
// seek and no rotational wait. A request that starts a little ahead of the
// head (within one track) waits only for the gap to pass under the head.
package model

import (
	"math"
	"time"
)

// Params describes the simulated drive. Capacity is the span the full-stroke
// seek covers: a small simulated disk behaves like a short-stroked region.
type Params struct {
	// Capacity is the disk size in bytes.
	Capacity int64
	// TransferRate is the media rate in bytes per second.
	TransferRate float64
	// Settle is the shortest non-zero seek (track-to-track plus settle).
	Settle time.Duration
	// FullStroke is the seek across the whole capacity.
	FullStroke time.Duration
	// RPM is the spindle speed; the average rotational wait is half a revolution.
	RPM float64
	// TrackBytes is how far ahead of the head a request may start and still
	// be reached by waiting for the platter instead of seeking.
	TrackBytes int64
}

// Defaults returns a 7200 rpm drive with 250 MB/s media rate whose seek curve
// gives roughly 130 random 4 KiB reads per second at queue depth 1 across the
// whole capacity.
func Defaults(capacity int64) Params {
	return Params{
		Capacity:     capacity,
		TransferRate: 250e6,
		Settle:       500 * time.Microsecond,
		FullStroke:   6 * time.Millisecond,
		RPM:          7200,
		TrackBytes:   1 << 20,
	}
}

// SeekTime is the time to move the head distance bytes.
func (p Params) SeekTime(distance int64) time.Duration {
	if distance < 0 {
		distance = -distance
	}
	if distance == 0 {
		return 0
	}
	frac := math.Min(1, float64(distance)/float64(p.Capacity))
	return p.Settle + time.Duration(float64(p.FullStroke-p.Settle)*math.Sqrt(frac))
}

// RotationTime is the average wait for a random sector: half a revolution.
func (p Params) RotationTime() time.Duration {
	return time.Duration(float64(time.Minute) / p.RPM / 2)
}

// TransferTime is the time to move length bytes to or from the media.
func (p Params) TransferTime(length int64) time.Duration {
	return time.Duration(float64(length) / p.TransferRate * float64(time.Second))
}

// ServiceTime is how long a request of length bytes at offset takes when the
// head sits at head (the byte just after the previous request). It returns
// the time and the head position afterwards.
func (p Params) ServiceTime(head, offset, length int64) (time.Duration, int64) {
	end := offset + length
	gap := offset - head
	switch {
	case gap == 0:
		return p.TransferTime(length), end
	case gap > 0 && gap <= p.TrackBytes:
		// The target is just ahead on this track: the drive either waits for
		// it to pass under the head or seeks, whichever is sooner.
		wait := min(p.TransferTime(gap), p.SeekTime(gap)+p.RotationTime())
		return wait + p.TransferTime(length), end
	default:
		return p.SeekTime(gap) + p.RotationTime() + p.TransferTime(length), end
	}
}
