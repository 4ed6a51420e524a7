package controller

import "math"

// Byte counts reach the arbitration from users (spec.size, up to 2^63-2 bytes), from
// the PV's capacity and from status fields. A plain int64 sum of such values can wrap
// negative, which makes a full node look empty (and a huge cache look small), so every
// sum of bytes the arbitration compares goes through these helpers.

// addBytes returns a+b, saturated at math.MaxInt64 (or math.MinInt64) instead of
// wrapping; ok is false when it saturated.
func addBytes(a, b int64) (sum int64, ok bool) {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64, false
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64, false
	}
	return a + b, true
}

// freeBytes returns what is left of capacity once used is taken, never less than 0.
// Negative entries in used (impossible through the CRD's validation) count as 0 so
// that they cannot make room.
func freeBytes(capacity int64, used ...int64) int64 {
	var sum int64
	for _, u := range used {
		sum, _ = addBytes(sum, max(u, 0))
	}
	// Both are in [0, MaxInt64] here, so the difference cannot wrap.
	return max(max(capacity, 0)-sum, 0)
}
