package dm

import (
	"errors"
	"strings"
	"testing"
)

func TestParseCacheStatusObservedUnderQemu(t *testing.T) {
	line := "0 2097152 cache 8 10/4096 512 0/1984 0 0 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -"
	st, err := ParseCacheStatus(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.Length != 2097152 || st.MetadataBlockSectors != 8 || st.MetadataUsed != 10 || st.MetadataTotal != 4096 ||
		st.BlockSectors != 512 || st.CacheUsed != 0 || st.CacheTotal != 1984 || st.Mode != Writethrough ||
		st.CoreArgs["migration_threshold"] != "2048" || st.Policy != "smq" || st.ReadOnly || st.NeedsCheck {
		t.Fatalf("unexpected parse: %+v", st)
	}
	if !st.Usable() || st.Health != CacheHealthy {
		t.Fatalf("fresh cache reported unusable: %+v", st)
	}
}

func TestParseCacheStatusCounters(t *testing.T) {
	line := "0 100 cache 8 72/4096 128 1900/2000 4294967295 17 3 4 5 6 0 2 metadata2 passthrough 2 migration_threshold 2048 smq 0 ro needs_check"
	st, err := ParseCacheStatus(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReadHits != 4294967295 || st.ReadMisses != 17 || st.WriteHits != 3 || st.WriteMisses != 4 ||
		st.Demotions != 5 || st.Promotions != 6 || st.Mode != Passthrough || st.ExtraFeatures[0] != "metadata2" {
		t.Fatalf("unexpected parse: %+v", st)
	}
	if !st.ReadOnly || !st.NeedsCheck || st.Health != CacheNeedsCheck || st.Usable() {
		t.Fatalf("flags: %+v", st)
	}
}

func TestParseCacheStatusFail(t *testing.T) {
	for _, word := range []string{"Fail", "Error"} {
		st, err := ParseCacheStatus("0 2097152 cache " + word)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Failed || st.Usable() || string(st.Health) != word {
			t.Fatalf("%s: %+v", word, st)
		}
	}
}

func TestParseCacheStatusErrors(t *testing.T) {
	good := strings.Fields("0 100 cache 8 10/4096 512 0/1984 0 0 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -")
	cases := map[string]string{
		"linear":        "0 100 linear 8:0 0",
		"truncated":     strings.Join(good[:10], " "),
		"bad fraction":  strings.Replace(strings.Join(good, " "), "10/4096", "4097/4096", 1),
		"bad mode":      strings.Replace(strings.Join(good, " "), " rw ", " rx ", 1),
		"odd core args": strings.Replace(strings.Join(good, " "), "2 migration_threshold 2048", "1 migration_threshold", 1),
		"trailing":      strings.Join(good, " ") + " x",
	}
	for name, line := range cases {
		_, err := ParseCacheStatus(line)
		if err == nil {
			t.Errorf("%s: ParseCacheStatus(%q) succeeded", name, line)
		}
		if got, want := errors.Is(err, ErrNotCacheTarget), name == "linear"; got != want {
			t.Errorf("%s: errors.Is(%v, ErrNotCacheTarget) = %v, want %v", name, err, got, want)
		}
	}
}

func TestDelta32(t *testing.T) {
	cases := []struct{ prev, cur, want uint64 }{
		{10, 15, 5},
		{4294967290, 5, 11}, // wrapped once
		{0, 0, 0},
		{1 << 40, 7, 7},  // not a 32-bit counter: it restarted
		{500000, 20, 20}, // far from the wrap point: the cache was re-created
	}
	for _, c := range cases {
		if got := Delta32(c.prev, c.cur); got != c.want {
			t.Errorf("Delta32(%d, %d) = %d, want %d", c.prev, c.cur, got, c.want)
		}
	}
}

func TestHitRatio(t *testing.T) {
	if r := (CacheStatus{ReadHits: 3, ReadMisses: 1}).HitRatio(); r != 0.75 {
		t.Fatalf("hit ratio = %v", r)
	}
	if r := (CacheStatus{}).HitRatio(); r != 0 {
		t.Fatalf("hit ratio without reads = %v", r)
	}
}

func FuzzParseCacheStatus(f *testing.F) {
	f.Add("0 2097152 cache 8 10/4096 512 0/1984 0 0 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -")
	f.Add("0 2097152 cache Fail")
	f.Add("0 100 cache 8 72/4096 128 1900/2000 4294967295 17 3 4 5 6 0 2 metadata2 passthrough 2 migration_threshold 2048 smq 0 ro needs_check")
	f.Fuzz(func(t *testing.T, line string) {
		st, err := ParseCacheStatus(line)
		if err != nil {
			return
		}
		if st.Failed {
			return
		}
		if st.MetadataUsed > st.MetadataTotal || st.CacheUsed > st.CacheTotal {
			t.Fatalf("used exceeds total in %q: %+v", line, st)
		}
		if st.Health == "" {
			t.Fatalf("no health for %q", line)
		}
	})
}

func FuzzParseDeviceList(f *testing.F) {
	f.Add("ssdcache-a 253 0 L--w 1\nssdcache-b 253 1 LIsw 0\n")
	f.Add("No devices found\n")
	f.Fuzz(func(t *testing.T, out string) {
		devs, err := parseDeviceList(out)
		if err != nil {
			return
		}
		for _, d := range devs {
			if d.Name == "" {
				t.Fatalf("empty name from %q", out)
			}
		}
	})
}

func TestParseDeviceList(t *testing.T) {
	devs, err := parseDeviceList("ssdcache-a 253 0 L--w 1\nssdcache-b 253 1 LIsw 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Suspended || devs[0].OpenCount != 1 || !devs[1].Suspended || !devs[1].InactiveTable {
		t.Fatalf("got %+v", devs)
	}
	if devs, err := parseDeviceList("No devices found\n"); err != nil || len(devs) != 0 {
		t.Fatalf("no devices: %v %v", devs, err)
	}
}
