package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFioFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "fio", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawDirection decodes the fixture independently of the parser, so the test
// compares the parser with fio's own fields rather than with numbers typed in.
func rawDirection(t *testing.T, out []byte, dir Direction) map[string]any {
	t.Helper()
	var doc struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Jobs[0][string(dir)].(map[string]any)
}

func TestParseFioJSONRecordedMatrix(t *testing.T) {
	for _, test := range Matrix() {
		t.Run(test.ID, func(t *testing.T) {
			out := readFioFixture(t, test.ID+".json")
			m, version, err := ParseFioJSON(out, test.Direction)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(version, "fio-") {
				t.Errorf("version = %q, want fio-...", version)
			}
			raw := rawDirection(t, out, test.Direction)
			if want := raw["bw_bytes"].(float64) / 1e6; m.MBps != want {
				t.Errorf("MBps = %v, want bw_bytes/1e6 = %v", m.MBps, want)
			}
			if want := raw["iops"].(float64); m.IOPS != want {
				t.Errorf("IOPS = %v, want %v", m.IOPS, want)
			}
			pct := raw["clat_ns"].(map[string]any)["percentile"].(map[string]any)
			if want := pct["99.000000"].(float64) / 1e3; m.LatP99us != want {
				t.Errorf("LatP99us = %v, want %v", m.LatP99us, want)
			}
			if m.LatP50us <= 0 || m.LatP50us > m.LatP99us {
				t.Errorf("p50 %v must be positive and at most p99 %v", m.LatP50us, m.LatP99us)
			}
			if m.IOBytes != int64(raw["io_bytes"].(float64)) {
				t.Errorf("IOBytes = %d, want %v", m.IOBytes, raw["io_bytes"])
			}
		})
	}
}

func TestParseFioJSONErrors(t *testing.T) {
	cases := []struct {
		name, fixture string
		dir           Direction
		wantErr       string
	}{
		{"job error", "job-error-eisdir.json", Read, "errno 21"},
		{"fio rejected the options", "readonly-write-rejected.txt", Write, "no JSON"},
		{"other direction did no I/O", "seq1m-q8t1-read.json", Write, "no I/O completed"},
		{"unknown direction", "seq1m-q8t1-read.json", Direction("trim"), "allowed read, write"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := ParseFioJSON(readFioFixture(t, c.fixture), c.dir)
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, c.wantErr)
			}
		})
	}
}

func TestParseFioJSONSkipsWarningsBeforeJSON(t *testing.T) {
	out := append([]byte("fio: this platform does not support process shared mutexes\nnote: something\n"),
		readFioFixture(t, "rnd4k-q1t1-read.json")...)
	want, _, err := ParseFioJSON(readFioFixture(t, "rnd4k-q1t1-read.json"), Read)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := ParseFioJSON(out, Read)
	if err != nil || got != want {
		t.Fatalf("with a warning prefix: %+v, %v; want %+v", got, err, want)
	}
}

func TestParseFioJSONMissingPercentiles(t *testing.T) {
	out := strings.Replace(string(readFioFixture(t, "seq1m-q1t1-read.json")), `"99.000000"`, `"98.000000"`, 1)
	_, _, err := ParseFioJSON([]byte(out), Read)
	if err == nil || !strings.Contains(err.Error(), "percentiles") {
		t.Fatalf("err = %v, want a percentile error", err)
	}
}

func FuzzParseFioJSON(f *testing.F) {
	for _, test := range Matrix() {
		f.Add(readFioFixture(f, test.ID+".json"), test.Direction == Read)
	}
	f.Add(readFioFixture(f, "job-error-eisdir.json"), true)
	f.Add([]byte("warning\n{\"jobs\":[{\"read\":{}}]}"), true)
	f.Fuzz(func(t *testing.T, out []byte, read bool) {
		dir := Write
		if read {
			dir = Read
		}
		m, _, err := ParseFioJSON(out, dir)
		if err != nil {
			return
		}
		if m.IOBytes <= 0 || m.MBps < 0 || m.IOPS < 0 || m.LatP50us < 0 || m.LatP99us < 0 {
			t.Fatalf("accepted an impossible measurement %+v", m)
		}
	})
}
