package bench

import "testing"

func TestDeltaWrapsAt32Bits(t *testing.T) {
	before := Counters{ReadHits: 0xFFFFFFF0, ReadMisses: 10, WriteHits: 0xFFFFFFFF, Promotions: 5}
	after := Counters{ReadHits: 0x10, ReadMisses: 15, WriteHits: 0, Promotions: 5}
	got := Delta(before, after)
	want := Counters{ReadHits: 0x20, ReadMisses: 5, WriteHits: 1, Promotions: 0}
	if got != want {
		t.Fatalf("Delta = %+v, want %+v", got, want)
	}
}

func TestHitRatios(t *testing.T) {
	c := Counters{ReadHits: 3, ReadMisses: 1}
	if r, ok := c.ReadHitRatio(); !ok || r != 0.75 {
		t.Errorf("ReadHitRatio = %v, %v; want 0.75", r, ok)
	}
	if _, ok := c.WriteHitRatio(); ok {
		t.Error("WriteHitRatio without writes must report no ratio")
	}
}

// A table load (a promotion's swap) restarts dm-cache's counters: the delta
// is what was counted since, not a 32-bit wrap of billions.
func TestDeltaOfRestartedCounters(t *testing.T) {
	before := Counters{ReadHits: 500, ReadMisses: 100, Promotions: 20}
	after := Counters{ReadHits: 30, ReadMisses: 5, Promotions: 2}
	if got, want := Delta(before, after), after; got != want {
		t.Fatalf("Delta = %+v, want %+v", got, want)
	}
}
