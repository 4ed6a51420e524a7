package hotset

import (
	"reflect"
	"testing"
)

func TestFromBlocksMergesNeighbours(t *testing.T) {
	s := FromBlocks([]uint64{7, 2, 3, 3, 4, 9}, 128)
	want := []Run{{2 * 128, 3 * 128}, {7 * 128, 128}, {9 * 128, 128}}
	if !reflect.DeepEqual(s.Runs, want) {
		t.Fatalf("runs %v, want %v", s.Runs, want)
	}
	if s.Sectors() != 5*128 {
		t.Fatalf("sectors %d, want %d", s.Sectors(), 5*128)
	}
}

func TestBlocksAtAnotherBlockSize(t *testing.T) {
	// Blocks of 128 sectors 2,3,4 and 9, read as blocks of 256 sectors:
	// 1 (sectors 256-511), 2 (512-767, holding block 4), and 4 (block 9).
	s := FromBlocks([]uint64{2, 3, 4, 9}, 128)
	tests := []struct {
		name                 string
		block, origin, limit uint64
		want                 []uint64
	}{
		{"same size", 128, 1 << 20, 100, []uint64{2, 3, 4, 9}},
		{"larger blocks", 256, 1 << 20, 100, []uint64{1, 2, 4}},
		{"smaller blocks", 64, 1 << 20, 100, []uint64{4, 5, 6, 7, 8, 9, 18, 19}},
		{"limit keeps origin order", 128, 1 << 20, 2, []uint64{2, 3}},
		{"origin shrank: no block past its end", 128, 4*128 + 5, 100, []uint64{2, 3}},
		{"no room", 128, 1 << 20, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Blocks(tt.block, tt.origin, tt.limit); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Blocks(%d, %d, %d) = %v, want %v", tt.block, tt.origin, tt.limit, got, tt.want)
			}
		})
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	s := FromBlocks([]uint64{0, 1, 5, 1000000}, 512)
	got, err := Decode(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded %v, want %v", got, s)
	}
}

func TestDecodeRefusesWhatEncodeNeverWrites(t *testing.T) {
	for name, text := range map[string]string{
		"no header":    "0 128\n",
		"other format": "ssdcache-hotset v2 sectors\n0 128\n",
		"one number":   header + "\n128\n",
		"zero length":  header + "\n0 0\n",
		"overlap":      header + "\n0 256\n128 128\n",
		"unsorted":     header + "\n512 128\n0 128\n",
		"not a number": header + "\n0 x\n",
		"past 2^64":    header + "\n18446744073709551615 2\n",
	} {
		if _, err := Decode([]byte(text)); err == nil {
			t.Errorf("%s: Decode(%q) succeeded", name, text)
		}
	}
}

func TestDirKeepsSetsAcrossInstances(t *testing.T) {
	dir := t.TempDir()
	s := FromBlocks([]uint64{1, 2, 3}, 128)
	if err := (Dir{Path: dir + "/sets"}).Save("pvc-1", s); err != nil {
		t.Fatal(err)
	}
	d := Dir{Path: dir + "/sets"} // as after a restart
	got, ok, err := d.Load("pvc-1")
	if err != nil || !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("Load = %v, %v, %v; want %v", got, ok, err, s)
	}
	if err := d.Delete("pvc-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := d.Load("pvc-1"); ok || err != nil {
		t.Fatalf("after Delete, Load = %v, %v", ok, err)
	}
	if err := d.Delete("pvc-1"); err != nil {
		t.Fatalf("deleting a missing set: %v", err)
	}
	if _, err := d.file("../x"); err == nil {
		t.Fatal("a volume ID with a slash names a file")
	}
}
