package readtrack

import (
	"fmt"
	"strconv"
	"strings"
)

// remapFields are the offsets, in the tracepoint's record, of the fields
// of block_bio_remap that the program reads. They are read from tracefs
// rather than assumed: kernels have moved them.
type remapFields struct {
	dev, sector, oldDev, rwbs int16
}

// parseRemapFormat reads the offsets from a tracepoint's format file,
// lines like "field:dev_t dev;	offset:8;	size:4;	signed:0;", and checks
// each field's size.
func parseRemapFormat(format string) (*remapFields, error) {
	type field struct{ offset, size int }
	found := map[string]field{}
	for _, line := range strings.Split(format, "\n") {
		decl, rest, ok := strings.Cut(strings.TrimSpace(line), ";")
		decl, isField := strings.CutPrefix(decl, "field:")
		if !ok || !isField {
			continue
		}
		words := strings.Fields(decl)
		name, _, _ := strings.Cut(words[len(words)-1], "[")
		var f field
		for _, attr := range strings.Split(rest, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(attr), ":")
			n, err := strconv.Atoi(v)
			switch {
			case err != nil:
			case k == "offset":
				f.offset = n
			case k == "size":
				f.size = n
			}
		}
		found[name] = f
	}
	var r remapFields
	want := []wantField{{"dev", 4, &r.dev}, {"sector", 8, &r.sector}, {"old_dev", 4, &r.oldDev}, {"rwbs", 0, &r.rwbs}}
	for _, w := range want {
		f, ok := found[w.name]
		switch {
		case !ok:
			return nil, fmt.Errorf("tracepoint %s has no field %q", tracepointName, w.name)
		case w.size != 0 && f.size != w.size:
			return nil, fmt.Errorf("tracepoint %s: field %q is %d bytes, want %d", tracepointName, w.name, f.size, w.size)
		case w.size == 0 && f.size < 2:
			return nil, fmt.Errorf("tracepoint %s: field %q is %d bytes, want at least 2", tracepointName, w.name, f.size)
		case f.offset <= 0 || f.offset > 1<<12:
			return nil, fmt.Errorf("tracepoint %s: field %q at offset %d", tracepointName, w.name, f.offset)
		}
		*w.into = int16(f.offset)
	}
	return &r, nil
}

// wantField is a field the program reads: its size (0: an array of at
// least two bytes) and where its offset goes.
type wantField struct {
	name string
	size int
	into *int16
}
