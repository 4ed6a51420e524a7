package v1alpha1

import (
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1/sizecases"
)

// TestParseCacheSizeTable: every size of the shared table parses to its value
// or is refused with its reason, naming the value (test/api holds the CRD to
// the same table).
func TestParseCacheSizeTable(t *testing.T) {
	cases, err := sizecases.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		got, err := ParseCacheSize(c.Size)
		if c.Refused != "" {
			if err == nil || !strings.Contains(err.Error(), c.Refused) || !strings.Contains(err.Error(), c.Size[:min(len(c.Size), MaxCacheSizeLength)]) {
				t.Errorf("ParseCacheSize(%q) = %+v, %v; want an error naming the value and containing %q", c.Size, got, err, c.Refused)
			}
			continue
		}
		if want := (CacheSize{Bytes: c.Bytes, Percent: c.Percent}); err != nil || got != want {
			t.Errorf("ParseCacheSize(%q) = %+v, %v; want %+v", c.Size, got, err, want)
		}
	}
}

func TestCacheSizeResolve(t *testing.T) {
	cases := []struct {
		size    CacheSize
		volume  int64
		want    int64
		wantErr string
	}{
		{size: CacheSize{Bytes: 1 << 30}, volume: 0, want: 1 << 30},
		{size: CacheSize{Percent: 10}, volume: 100 << 30, want: 10 << 30},
		{size: CacheSize{Percent: 100}, volume: 1 << 30, want: 1 << 30},
		// 10% of 1000 MiB is 100 MiB exactly; of 1001 MiB it rounds down to 100 MiB.
		{size: CacheSize{Percent: 10}, volume: 1001 << 20, want: 100 << 20},
		// Large volumes must not overflow.
		{size: CacheSize{Percent: 100}, volume: 1 << 62, want: 1 << 62},
		{size: CacheSize{Percent: 1}, volume: 1 << 30, wantErr: "less than the minimum"},
		{size: CacheSize{Percent: 10}, volume: 0, wantErr: "size is unknown"},
	}
	for _, c := range cases {
		got, err := c.size.Resolve(c.volume)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v.Resolve(%d) error = %v, want one containing %q", c.size, c.volume, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v.Resolve(%d) = %d, %v; want %d", c.size, c.volume, got, err, c.want)
		}
	}
}

func TestCacheSizeStringRoundTrips(t *testing.T) {
	for _, in := range []string{"10Gi", "10%", "100%", "16Mi"} {
		s, err := ParseCacheSize(in)
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != in {
			t.Errorf("ParseCacheSize(%q).String() = %q", in, s.String())
		}
	}
}

func TestFormatHitRatio(t *testing.T) {
	cases := []struct {
		hits, misses int64
		want         string
	}{
		{0, 0, "0.0%"},
		{0, 10, "0.0%"},
		{7, 1, "87.5%"},
		{1, 2, "33.3%"},
		{2, 1, "66.6%"},
		{10, 0, "100.0%"},
		{1 << 61, 1 << 61, "50.0%"},
	}
	for _, c := range cases {
		if got := FormatHitRatio(c.hits, c.misses); got != c.want {
			t.Errorf("FormatHitRatio(%d, %d) = %q, want %q", c.hits, c.misses, got, c.want)
		}
	}
}

func TestParseWarmupLimit(t *testing.T) {
	for s, want := range map[string]int64{"2Gi": 2 << 30, "0": 0, "1536Mi": 1536 << 20, "1Ti": 1 << 40} {
		if n, ok, err := ParseWarmupLimit(s); err != nil || !ok || n != want {
			t.Errorf("%q: %d %v %v, want %d", s, n, ok, err, want)
		}
	}
	if _, ok, err := ParseWarmupLimit(""); ok || err != nil {
		t.Errorf("empty: %v %v, want no limit", ok, err)
	}
	for _, s := range []string{"1.5Gi", "-1", "1e100", "9223372036854775808", "lots", "100m"} {
		if _, _, err := ParseWarmupLimit(s); err == nil || !strings.Contains(err.Error(), "warmupLimit") {
			t.Errorf("%q accepted (%v)", s, err)
		}
	}
}
