package job

import (
	"bytes"
	"testing"
)

func TestPrefixWriterPrefixesWholeLinesOnly(t *testing.T) {
	var out bytes.Buffer
	w := NewPrefixWriter(&out, "vm| ")
	for _, chunk := range []string{"first li", "ne\nsecond\nthi", "rd"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := out.String(), "vm| first line\nvm| second\n"; got != want {
		t.Fatalf("got %q, want %q (the unfinished third line waits)", got, want)
	}
}
