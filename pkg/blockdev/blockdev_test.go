package blockdev

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

func TestParseWipefs(t *testing.T) {
	out := []byte(`{
   "signatures": [
      {"device":"vdb", "offset":"0x438", "type":"ext4", "uuid":"5e1d", "label":null},
      {"device":"vdb", "offset":"0x1fe", "type":"dos", "uuid":null, "label":null}
   ]
}`)
	sigs, err := ParseWipefs(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(sigs) != 2 || sigs[0].Type != "ext4" || sigs[1].Type != "dos" || sigs[0].Offset != "0x438" {
		t.Fatalf("got %+v", sigs)
	}
	if sigs, err := ParseWipefs([]byte("\n")); err != nil || sigs != nil {
		t.Fatalf("blank device: %v %v", sigs, err)
	}
	if _, err := ParseWipefs([]byte("{")); err == nil {
		t.Fatal("truncated JSON accepted")
	}
}

func FuzzParseWipefs(f *testing.F) {
	f.Add([]byte(`{"signatures":[{"type":"xfs","offset":"0x0"}]}`))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, out []byte) {
		sigs, err := ParseWipefs(out)
		if err != nil {
			return
		}
		// What parsed must survive a round trip through the same schema.
		again, err := json.Marshal(map[string][]Signature{"signatures": sigs})
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseWipefs(again)
		if err != nil || (len(sigs) > 0 && !reflect.DeepEqual(back, sigs)) {
			t.Fatalf("round trip of %q: %v, %v", out, back, err)
		}
	})
}

func TestParseStat(t *testing.T) {
	st, err := ParseStat("    1234        5    8000     100     40        0     160      30        0     120     130        0        0        0        0        0        0\n")
	if err != nil {
		t.Fatal(err)
	}
	if st.ReadBytes != 8000*512 || st.WriteBytes != 160*512 {
		t.Fatalf("got %+v", st)
	}
	if _, err := ParseStat("1 2 3"); err == nil {
		t.Fatal("short stat accepted")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("1 2 3 4 5 6 7 8 9 10 11")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseStat(s)
		if err == nil && (st.ReadBytes%512 != 0 || st.WriteBytes%512 != 0) {
			t.Fatalf("byte counts not in sectors: %+v", st)
		}
	})
}

// ZeroHead writes only to the device the table will use: a path that opens
// something else (here a regular file, device 0:0) is refused untouched.
func TestZeroHeadRefusesAnotherDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-the-lv")
	data := []byte("metadata that must survive")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	err := NewHost(nil).ZeroHead(path, dm.DevNum{Major: 253, Minor: 7}, 4096)
	if err == nil || !strings.Contains(err.Error(), "not 253:7") {
		t.Fatalf("err = %v, want a refusal naming the expected device", err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(data) {
		t.Fatalf("refused path was written: %q", got)
	}
}
