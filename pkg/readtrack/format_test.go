package readtrack

import (
	"strings"
	"testing"
)

// The format of block_bio_remap on Debian's 6.1 kernel.
const remapFormat61 = `name: block_bio_remap
ID: 1204
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:dev_t dev;	offset:8;	size:4;	signed:0;
	field:sector_t sector;	offset:16;	size:8;	signed:0;
	field:unsigned int nr_sector;	offset:24;	size:4;	signed:0;
	field:dev_t old_dev;	offset:28;	size:4;	signed:0;
	field:sector_t old_sector;	offset:32;	size:8;	signed:0;
	field:char rwbs[8];	offset:40;	size:8;	signed:0;

print fmt: "%d,%d %s %llu + %u <- (%d,%d) %llu", ((unsigned int) ((REC->dev) >> 20)), ...
`

func TestParseRemapFormat(t *testing.T) {
	f, err := parseRemapFormat(remapFormat61)
	if err != nil {
		t.Fatal(err)
	}
	if want := (remapFields{dev: 8, sector: 16, oldDev: 28, rwbs: 40}); *f != want {
		t.Fatalf("fields %+v, want %+v", *f, want)
	}
}

func TestParseRemapFormatNamesWhatIsWrong(t *testing.T) {
	for _, c := range []struct{ edit, want string }{
		{"field:dev_t old_dev;", `no field "old_dev"`},
		{"size:8;	signed:0;\n	field:unsigned int nr_sector", `field "sector" is 4 bytes, want 8`},
	} {
		var format string
		switch c.want {
		case `no field "old_dev"`:
			format = strings.Replace(remapFormat61, c.edit, "field:dev_t other;", 1)
		default:
			format = strings.Replace(remapFormat61, c.edit, "size:4;	signed:0;\n	field:unsigned int nr_sector", 1)
		}
		if _, err := parseRemapFormat(format); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one with %q", err, c.want)
		}
	}
}

func TestKernelDevIsMKDEV(t *testing.T) {
	if got := kernelDev(254, 3); got != 254<<20|3 {
		t.Fatalf("kernelDev(254, 3) = %d", got)
	}
}
