package controller

import (
	"math"
	"testing"
)

func TestAddBytesSaturates(t *testing.T) {
	cases := []struct {
		a, b   int64
		want   int64
		wantOK bool
	}{
		{1, 2, 3, true},
		{math.MaxInt64 - 1, 1, math.MaxInt64, true},
		{math.MaxInt64, 1, math.MaxInt64, false},
		{9223372036854775800, 9223372036854775000, math.MaxInt64, false},
		{5 << 30, 9223372036854775800, math.MaxInt64, false},
		{math.MinInt64, -1, math.MinInt64, false},
		{math.MinInt64, math.MaxInt64, -1, true},
	}
	for _, c := range cases {
		if got, ok := addBytes(c.a, c.b); got != c.want || ok != c.wantOK {
			t.Errorf("addBytes(%d, %d) = %d, %v; want %d, %v", c.a, c.b, got, ok, c.want, c.wantOK)
		}
	}
}

func TestFreeBytes(t *testing.T) {
	cases := []struct {
		capacity int64
		used     []int64
		want     int64
	}{
		{10, []int64{3, 4}, 3},
		{10, []int64{6, 6}, 0},
		{20 << 30, []int64{9223372036854775800, 9223372036854775000}, 0},
		{math.MaxInt64, []int64{math.MaxInt64, math.MaxInt64}, 0},
		{10, []int64{-5, math.MinInt64}, 10},
		{-1, nil, 0},
	}
	for _, c := range cases {
		if got := freeBytes(c.capacity, c.used...); got != c.want {
			t.Errorf("freeBytes(%d, %v) = %d, want %d", c.capacity, c.used, got, c.want)
		}
	}
}
