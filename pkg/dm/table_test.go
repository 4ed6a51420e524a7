package dm

import (
	"reflect"
	"strings"
	"testing"
)

func TestCacheTableRoundTrip(t *testing.T) {
	c := CacheTarget{
		Metadata: DevNum{253, 1}, Data: DevNum{253, 2}, Origin: DevNum{8, 16},
		BlockSectors: 128, Mode: Writethrough, Policy: "smq",
	}
	table := Table{Length: 2097152, Target: c}
	want := "0 2097152 cache 253:1 253:2 8:16 128 1 writethrough smq 0"
	if got := table.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	parsed, err := ParseTable(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(parsed, table) {
		t.Fatalf("ParseTable = %#v, want %#v", parsed, table)
	}
}

func TestParseTableAsPrintedByKernel(t *testing.T) {
	// dmsetup table echoes the constructor arguments after the three devices.
	line := "0 409600 cache 254:3 254:4 254:2 512 2 metadata2 writethrough smq 2 migration_threshold 4096"
	tbl, err := ParseTable(line)
	if err != nil {
		t.Fatal(err)
	}
	c := tbl.Target.(CacheTarget)
	if c.Mode != Writethrough || c.BlockSectors != 512 || !reflect.DeepEqual(c.ExtraFeatures, []string{"metadata2"}) ||
		!reflect.DeepEqual(c.PolicyArgs, []string{"migration_threshold", "4096"}) {
		t.Fatalf("unexpected parse: %#v", c)
	}
}

func TestParseTableLinear(t *testing.T) {
	tbl, err := ParseTable("0 1024 linear 8:0 2048\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.Target.(LinearTarget); got != (LinearTarget{Device: DevNum{8, 0}, Offset: 2048}) {
		t.Fatalf("got %#v", got)
	}
}

func TestCacheWithoutModeIsWriteback(t *testing.T) {
	tbl, err := ParseTable("0 8 cache 1:1 1:2 1:3 64 0 smq 0")
	if err != nil {
		t.Fatal(err)
	}
	c := tbl.Target.(CacheTarget)
	if c.Mode != Writeback {
		t.Fatalf("mode = %s, want writeback (dm-cache's default)", c.Mode)
	}
	if err := c.Validate(); err == nil {
		t.Fatal("a writeback cache must never validate")
	}
}

func TestParseTableErrors(t *testing.T) {
	for _, line := range []string{
		"", "0", "0 10", "5 10 linear 8:0 0", "0 0 linear 8:0 0", "0 10 linear 8:0",
		"0 10 linear sda 0", "0 10 cache 1:1 1:2 1:3 64 5 writethrough smq 0",
		"0 10 cache 1:1 1:2 1:3 64 1 writethrough smq 0 extra", "0 10 error x",
	} {
		if _, err := ParseTable(line); err == nil {
			t.Errorf("ParseTable(%q) succeeded, want error", line)
		}
	}
}

func TestValidateCacheTarget(t *testing.T) {
	ok := CacheTarget{Metadata: DevNum{1, 1}, Data: DevNum{1, 2}, Origin: DevNum{1, 3}, BlockSectors: 128, Mode: Writethrough}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.BlockSectors = 100
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "multiple of 64") {
		t.Fatalf("block size 100: err = %v", err)
	}
	bad = ok
	bad.Data = DevNum{}
	if err := bad.Validate(); err == nil {
		t.Fatal("missing data device accepted")
	}
}

func FuzzParseTable(f *testing.F) {
	for _, s := range []string{
		"0 2097152 cache 253:1 253:2 8:16 128 1 writethrough smq 0",
		"0 1024 linear 8:0 2048",
		"0 10 error",
		"0 10 thin-pool 1:1 1:2 128 0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		tbl, err := ParseTable(line)
		if err != nil {
			return
		}
		// Whatever parses must render to a line that parses to the same table.
		again, err := ParseTable(tbl.String())
		if err != nil {
			t.Fatalf("re-parse of %q (from %q): %v", tbl.String(), line, err)
		}
		if again.String() != tbl.String() {
			t.Fatalf("not stable: %q -> %q", tbl.String(), again.String())
		}
	})
}

func FuzzParseDevNum(f *testing.F) {
	f.Add("8:0")
	f.Add("253:4294967295")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDevNum(s)
		if err != nil {
			return
		}
		if back, err := ParseDevNum(d.String()); err != nil || back != d {
			t.Fatalf("round trip of %q: %v %v", s, back, err)
		}
	})
}

func TestParseStatesJoinsTablesAndStatusesByName(t *testing.T) {
	tables := "ssdcache-a: 0 2048 linear 254:1 0\nssdcache-b: 0 4096 cache 254:2 254:3 254:4 128 1 writethrough smq 0\n" +
		"striped: 0 10 linear 8:0 0\nstriped: 10 10 linear 8:16 0\nnew: 0 8 linear 8:0 0\n"
	statuses := "ssdcache-a: 0 2048 linear\nssdcache-b: 0 4096 cache 8 10/4096 128 5/16384 1 2 0 0 0 0 0 1 writethrough 2 migration_threshold 2048 smq 0 rw -\n" +
		"striped: 0 10 linear\nstriped: 10 10 linear\n"
	states, err := parseStates(tables, statuses, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 2 {
		t.Fatalf("states %v: want ssdcache-a and ssdcache-b (striped has two targets, new no status yet)", states)
	}
	if _, ok := states["ssdcache-b"].Table.Target.(CacheTarget); !ok || !strings.HasPrefix(states["ssdcache-b"].Status, "0 4096 cache 8 ") {
		t.Fatalf("ssdcache-b: %+v", states["ssdcache-b"])
	}
	if s, err := parseStates("No devices found\n", "No devices found\n", nil); err != nil || len(s) != 0 {
		t.Fatalf("no devices: %v, %v", s, err)
	}
	// A device keep leaves out is not parsed: its table cannot fail the others.
	foreign := tables + "other: 0 8 cache not-a-cache-table\n"
	if _, err := parseStates(foreign, statuses+"other: 0 8 cache\n", nil); err == nil {
		t.Fatal("a malformed cache table was parsed without an error")
	}
	kept, err := parseStates(foreign, statuses+"other: 0 8 cache\n", func(name string) bool { return strings.HasPrefix(name, "ssdcache-") })
	if err != nil || len(kept) != 2 {
		t.Fatalf("states kept by name: %v, %v; want ssdcache-a and ssdcache-b", kept, err)
	}
}
