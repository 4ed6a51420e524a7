package dm

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseWrittenAreas(t *testing.T) {
	// Three areas of 128 sectors and a short last one; areas 1 and 3 were written.
	out := `0+128 4 0 32 1 0 0 0 0 0 1 1 1 0
128+128 0 0 0 0 2 0 16 3 0 3 3 0 3
256+128 9 0 72 2 0 0 0 0 0 2 2 2 0
384+20 0 0 0 0 1 0 8 1 0 1 1 0 1
`
	got, err := ParseWrittenAreas(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1, 3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("written areas %v, want %v", got, want)
	}
	if _, err := ParseWrittenAreas("0+128 1 2"); err == nil {
		t.Fatal("a short line was accepted")
	}
	// Fields split by runs of blanks and tabs, blank lines, a CRLF ending.
	spaced := "\n0+128  1\t0 8 0 0 0 0 0\r\n\n  128+128 0 0 0 0 1 0 8 1\n"
	if got, err := ParseWrittenAreas(spaced); err != nil || !reflect.DeepEqual(got, []uint64{1}) {
		t.Fatalf("written areas of spaced output %v, %v; want [1]", got, err)
	}
	if _, err := ParseWrittenAreas("x+128 1 0 8 0 0 0 0 0"); err == nil || !strings.Contains(err.Error(), `"x+128"`) {
		t.Fatalf("a malformed area gave %v, want an error naming it", err)
	}
}

func TestTrackedAreasBoundTheKernelMemory(t *testing.T) {
	for _, c := range []struct {
		cpus int
		want uint64
	}{{1, MaxTrackedAreas}, {2, MaxTrackedAreas}, {64, 2475}, {256, 627}, {100000, 1}} {
		got := TrackedAreasFor(c.cpus)
		if got != c.want {
			t.Errorf("%d CPUs: %d areas, want %d", c.cpus, got, c.want)
		}
		if bytes := got * uint64(statsAreaBytes+statsAreaBytesPerCPU*c.cpus); got > 1 && bytes > StatsRegionBudget {
			t.Errorf("%d CPUs: %d areas take %d bytes, over %d", c.cpus, got, bytes, StatsRegionBudget)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]int{"0-63\n": 64, "0": 1, "0,2-3": 3, "0-255": 256} {
		if got, err := ParseCPUList(in); err != nil || got != want {
			t.Errorf("ParseCPUList(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a-b", "3-1"} {
		if _, err := ParseCPUList(bad); err == nil || !strings.Contains(err.Error(), "CPU list") {
			t.Errorf("ParseCPUList(%q): %v, want an error naming the list", bad, err)
		}
	}
}
