package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseWorkingSets(t *testing.T) {
	sets, err := ParseWorkingSets([]string{"25%", "512Mi", "1073741824", "33%"}, 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []WorkingSet{
		{Label: "25%", Bytes: 256 << 20, OffsetBytes: 0},
		{Label: "512Mi", Bytes: 512 << 20, OffsetBytes: 256 << 20},
		{Label: "1073741824", Bytes: 1 << 30, OffsetBytes: 768 << 20},
		{Label: "33%", Bytes: 337 << 20, OffsetBytes: 1792 << 20}, // 337.92 MiB rounded down to whole MiB
	}
	if len(sets) != len(want) {
		t.Fatalf("got %+v", sets)
	}
	for i := range want {
		if !reflect.DeepEqual(sets[i], want[i]) {
			t.Errorf("set %d = %+v, want %+v", i, sets[i], want[i])
		}
	}
	shared, _ := ParseWorkingSets([]string{"1Mi", "2Mi"}, 0, false)
	if shared[1].OffsetBytes != 0 {
		t.Errorf("without disjoint, offset = %d, want 0", shared[1].OffsetBytes)
	}
}

func TestParseWorkingSetsErrors(t *testing.T) {
	cases := []struct {
		specs     []string
		cacheSize int64
		want      string
	}{
		{nil, 0, "none given"},
		{[]string{"25%"}, 0, "-cache-size must be given"},
		{[]string{"0%"}, 1 << 30, "allowed percentages"},
		{[]string{"abc%"}, 1 << 30, "allowed percentages"},
		{[]string{"100Ki"}, 0, "at least 1Mi"},
		{[]string{"lots"}, 0, `"lots" is not a size`},
		{[]string{"-1Gi"}, 0, "is not a size"},
	}
	for _, c := range cases {
		_, err := ParseWorkingSets(c.specs, c.cacheSize, true)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "working-sets") {
			t.Errorf("%v: err = %v, want working-sets: ...%s", c.specs, err, c.want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	got, err := ParseTarget("raw-ssd=/dev/disk/by-id/nvme-eui.0025:38b5")
	if err != nil || got != (Target{Name: "raw-ssd", Path: "/dev/disk/by-id/nvme-eui.0025:38b5"}) {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"raw-ssd", "=/dev/x", "Raw=/dev/x", "a b=/dev/x", "x="} {
		if _, err := ParseTarget(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseTarget(%q) err = %v, want an error quoting the spec", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no targets", func(c *Config) { c.Targets = nil }, "targets: none given"},
		{"duplicate target", func(c *Config) { c.Targets = append(c.Targets, c.Targets[0]) }, `name "raw-ssd" given twice`},
		{"unknown ssd-ref", func(c *Config) { c.SSDReference = "nvme" }, `ssd-ref: "nvme" is not a target name`},
		{"same refs", func(c *Config) { c.HDDReference = c.SSDReference }, "they must differ"},
		{"zero runs", func(c *Config) { c.Runs = 0 }, "runs: 0; allowed: 1..1000"},
		{"negative interval", func(c *Config) { c.Interval = -time.Second }, "must not be negative"},
		{"negative test interval", func(c *Config) { c.TestInterval = -time.Second }, "test-interval (-1s)"},
		{"writes in read-only", func(c *Config) { c.ReadOnly = true }, `"seq1m-q8t1-write" writes`},
		{"fraction", func(c *Config) { c.ConvergeFraction = 1.5 }, "converge-fraction: 1.5"},
		{"plot test", func(c *Config) { c.PlotTest = "seq1m-q8t1-trim" }, "plot-test"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := cfg.Validate(); err != nil {
				t.Fatalf("base config invalid: %v", err)
			}
			c.mutate(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestSelectTests(t *testing.T) {
	got, err := SelectTests([]string{"rnd4k-q1t1-read", "read", "SEQ1M-Q1T1-WRITE"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, test := range got {
		ids = append(ids, test.ID)
	}
	want := "seq1m-q8t1-read seq1m-q1t1-read rnd4k-q32t1-read rnd4k-q1t1-read seq1m-q1t1-write"
	if strings.Join(ids, " ") != want {
		t.Errorf("got %v, want matrix order without duplicates: %s", ids, want)
	}
	if _, err := SelectTests([]string{"rnd8k-q1t1-read"}); err == nil || !strings.Contains(err.Error(), "allowed: all, read, write") {
		t.Errorf("err = %v, want the allowed names listed", err)
	}
}

func TestMatrixMatchesCrystalDiskMark(t *testing.T) {
	want := map[string]string{
		"seq1m-q8t1-read": "read 1048576 8", "seq1m-q1t1-read": "read 1048576 1",
		"rnd4k-q32t1-read": "randread 4096 32", "rnd4k-q1t1-read": "randread 4096 1",
		"seq1m-q8t1-write": "write 1048576 8", "seq1m-q1t1-write": "write 1048576 1",
		"rnd4k-q32t1-write": "randwrite 4096 32", "rnd4k-q1t1-write": "randwrite 4096 1",
	}
	m := Matrix()
	if len(m) != len(want) {
		t.Fatalf("%d tests, want %d", len(m), len(want))
	}
	for _, test := range m {
		a := fioJobSpec{Path: "/dev/x", Size: 1 << 20, Test: test}.args()
		got := argValue(a, "--rw") + " " + argValue(a, "--bs") + " " + argValue(a, "--iodepth")
		if got != want[test.ID] {
			t.Errorf("%s: rw bs iodepth = %q, want %q", test.ID, got, want[test.ID])
		}
	}
}

func TestFioArgs(t *testing.T) {
	job := fioJobSpec{
		Path: "/dev/disk/by-path/pci-0000:00:05.0", Offset: 1 << 20, Size: 4 << 20, Test: Matrix()[2],
		ReadOnly: true, Runtime: 1500 * time.Millisecond, IOLimit: 2 << 20, RandSeed: 99,
	}
	a := job.args()
	checks := map[string]string{
		"--filename": `/dev/disk/by-path/pci-0000\:00\:05.0`, "--offset": "1048576", "--size": "4194304",
		"--runtime": "2", "--io_size": "2097152", "--randseed": "99", "--randrepeat": "1",
		"--ioengine": "libaio", "--direct": "1", "--numjobs": "1", "--output-format": "json",
		"--allow_file_create": "0",
	}
	for k, v := range checks {
		if got := argValue(a, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(strings.Join(a, " "), "--readonly") {
		t.Errorf("read-only job lacks --readonly: %v", a)
	}
	full := fioJobSpec{Path: "/f", Size: 1 << 20, Test: Matrix()[0]}.args()
	for _, k := range []string{"--runtime", "--io_size", "--readonly"} {
		if strings.Contains(strings.Join(full, " "), k) {
			t.Errorf("unlimited job has %s: %v", k, full)
		}
	}
}
