package dm

import (
	"fmt"
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
	if got, _ := ParseReadAreas(out); !reflect.DeepEqual(got, []uint64{0, 2}) {
		t.Fatalf("read areas %v, want [0 2]", got)
	}
	if _, err := ParseWrittenAreas("0+128 1 2"); err == nil {
		t.Fatal("a short line was accepted")
	}
	// Fields split by runs of blanks and tabs, blank lines, a CRLF ending.
	spaced := "\n0+128  1\t0 8 0 0 0 0 0\r\n\n  128+128 0 0 0 0 1 0 8 1\n"
	if got, err := ParseReadAreas(spaced); err != nil || !reflect.DeepEqual(got, []uint64{0}) {
		t.Fatalf("read areas of spaced output %v, %v; want [0]", got, err)
	}
	if got, err := ParseWrittenAreas(spaced); err != nil || !reflect.DeepEqual(got, []uint64{1}) {
		t.Fatalf("written areas of spaced output %v, %v; want [1]", got, err)
	}
	if _, err := ParseReadAreas("x+128 1 0 8 0 0 0 0 0"); err == nil || !strings.Contains(err.Error(), `"x+128"`) {
		t.Fatalf("a malformed area gave %v, want an error naming it", err)
	}
}

// BenchmarkParseReadAreas: one look of the promoter at a region of
// MaxTrackedAreas areas, 1 % of them read.
func BenchmarkParseReadAreas(b *testing.B) {
	var out strings.Builder
	for i := range MaxTrackedAreas {
		reads := 0
		if i%100 == 0 {
			reads = 3
		}
		fmt.Fprintf(&out, "%d+512 %d 0 %d 0 0 0 0 0 0 0 0 0 0\n", i*512, reads, reads*8)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseReadAreas(out.String()); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseStatsList(t *testing.T) {
	out := "0: 0+2097152 128 ssdcache-writes -\n3: 0+2097152 256 ssdcache-writes -\n"
	want := map[uint64]statsRegion{0: {lengthSectors: 2097152, areaSectors: 128}, 3: {lengthSectors: 2097152, areaSectors: 256}}
	if got := parseStatsList(out); !reflect.DeepEqual(got, want) {
		t.Fatalf("regions %v", got)
	}
}
