package agent

import (
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

func TestRecentReadsSpanTheLastWindowOnly(t *testing.T) {
	s := NewSamples()
	at := time.Unix(0, 0)
	put := func(hits, misses uint64) {
		at = at.Add(DefaultSampleInterval)
		s.put("v", Sample{Status: dm.CacheStatus{ReadHits: hits, ReadMisses: misses}, Time: at})
	}
	put(0, 0)
	if _, _, ok := s.RecentReads("v"); ok {
		t.Fatal("a ratio from one sample")
	}
	// A cold start: 1000 misses, then only hits for a whole window.
	put(0, 1000)
	for i := 1; i <= RecentHitWindow; i++ {
		put(uint64(i*100), 1000)
	}
	hits, misses, ok := s.RecentReads("v")
	if !ok || hits != RecentHitWindow*100 || misses != 0 {
		t.Fatalf("window holds hits %d misses %d (ok %v); want %d hits and the cold misses aged out", hits, misses, ok, RecentHitWindow*100)
	}
	if latest, _ := s.Latest("v"); latest.Status.ReadHits != RecentHitWindow*100 {
		t.Fatalf("latest %+v", latest)
	}
}

func TestRecentReadsAcrossACounterWrap(t *testing.T) {
	s := NewSamples()
	s.put("v", Sample{Status: dm.CacheStatus{ReadHits: 1<<32 - 10, ReadMisses: 5}})
	s.put("v", Sample{Status: dm.CacheStatus{ReadHits: 20, ReadMisses: 5}})
	if hits, misses, _ := s.RecentReads("v"); hits != 30 || misses != 0 {
		t.Fatalf("hits %d misses %d across a 32-bit wrap, want 30 and 0", hits, misses)
	}
	s.forget("v")
	if _, ok := s.Latest("v"); ok {
		t.Fatal("forgotten volume still has samples")
	}
}
