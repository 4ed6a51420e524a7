package v1alpha1

import (
	"strings"
	"testing"
)

func TestParseCacheSizeAccepts(t *testing.T) {
	cases := map[string]CacheSize{
		"10Gi":        {Bytes: 10 << 30},
		"16Mi":        {Bytes: 16 << 20},
		"500M":        {Bytes: 500_000_000},
		"0.5Gi":       {Bytes: 512 << 20},
		"1e9":         {Bytes: 1_000_000_000},
		"1%":          {Percent: 1},
		"10%":         {Percent: 10},
		"100%":        {Percent: 100},
		"17179869184": {Bytes: 16 << 30},
	}
	for in, want := range cases {
		got, err := ParseCacheSize(in)
		if err != nil {
			t.Errorf("ParseCacheSize(%q): unexpected error %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("ParseCacheSize(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func TestParseCacheSizeRefuses(t *testing.T) {
	cases := map[string]string{
		"":          "empty",
		"0%":        "from 1% to 100%",
		"101%":      "from 1% to 100%",
		"10.5%":     "from 1% to 100%",
		"+5%":       "from 1% to 100%",
		"05%":       "from 1% to 100%",
		"%":         "from 1% to 100%",
		"ten":       "want a quantity",
		"10 Gi":     "want a quantity",
		"10GB":      "want a quantity",
		"1.5":       "whole number of bytes",
		"15Mi":      "at least 16Mi",
		"0":         "at least 16Mi",
		"-1Gi":      "at least 16Mi",
		"9000000Ei": "larger than",
	}
	for in, wantMsg := range cases {
		_, err := ParseCacheSize(in)
		if err == nil {
			t.Errorf("ParseCacheSize(%q): no error, want one containing %q", in, wantMsg)
			continue
		}
		if !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("ParseCacheSize(%q) error %q does not contain %q", in, err, wantMsg)
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
