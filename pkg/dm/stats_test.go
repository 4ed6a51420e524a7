package dm

import (
	"reflect"
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
}

func TestParseStatsList(t *testing.T) {
	out := "0: 0+2097152 128 ssdcache-writes -\n3: 0+2097152 256 ssdcache-writes -\n"
	if got := parseStatsList(out); !reflect.DeepEqual(got, map[uint64]uint64{0: 128, 3: 256}) {
		t.Fatalf("regions %v", got)
	}
}
