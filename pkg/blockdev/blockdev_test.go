package blockdev

import (
	"encoding/json"
	"reflect"
	"testing"
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
