package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/clock"
	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/command"
)

// TestRealFioEndToEnd runs real fio (O_DIRECT, libaio) on small files in a
// temp dir and checks that the three report files are written and well-formed.
// It asserts structure only: the numbers depend on the machine.
func TestRealFioEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real fio; skipped under -short")
	}
	fio, err := exec.New().LookPath("fio")
	if err != nil {
		t.Skip("fio is not installed (apt-get install -y fio)")
	}
	dir := t.TempDir()
	sets, err := ParseWorkingSets([]string{"2Mi", "50%"}, 4<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Targets: []Target{
			{Name: "raw-ssd", Path: filepath.Join(dir, "ssd.img")},
			{Name: "raw-hdd", Path: filepath.Join(dir, "hdd.img")},
			{Name: "cached", Path: filepath.Join(dir, "cached.img")},
		},
		Runs: 2, WorkingSets: sets, Tests: Matrix(), RandSeed: 1,
		SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: "seq1m-q8t1-read",
	}
	var progress bytes.Buffer
	b, err := New(cfg, Deps{
		Fio: CommandFioRunner{Runner: command.NewRunner(exec.New()), Binary: fio}, Inspector: OSInspector{},
		Clock: clock.RealClock{}, Progress: &progress, Version: "integration",
	})
	if err != nil {
		t.Fatal(err)
	}
	report, err := b.Run(context.Background())
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	out := filepath.Join(dir, "out")
	if err := WriteFiles(out, report); err != nil {
		t.Fatal(err)
	}
	checkTargetsLaidOut(t, cfg)
	checkReportJSON(t, filepath.Join(out, ReportJSON), cfg)
	checkReportMarkdown(t, filepath.Join(out, ReportMarkdown))
	checkSVG(t, filepath.Join(out, ConvergenceSVG), report)
	if lines := strings.Count(progress.String(), "MB/s"); lines != len(report.Results) {
		t.Errorf("%d progress lines for %d results", lines, len(report.Results))
	}
}

func checkTargetsLaidOut(t *testing.T, cfg Config) {
	t.Helper()
	for _, target := range cfg.Targets {
		st, err := os.Stat(target.Path)
		if err != nil || st.Size() != cfg.span() {
			t.Errorf("target %s: %v, size %d; want laid out to exactly %d bytes", target.Name, err, st.Size(), cfg.span())
		}
	}
}

func checkReportJSON(t *testing.T, path string, cfg Config) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("report.json does not decode: %v", err)
	}
	if want := len(cfg.WorkingSets) * cfg.Runs * len(cfg.Targets) * len(cfg.Tests); len(r.Results) != want {
		t.Errorf("report.json has %d results, want %d", len(r.Results), want)
	}
	if r.SchemaVersion != SchemaVersion || !strings.HasPrefix(r.FioVersion, "fio-") || len(r.Prefilled) != 3 {
		t.Errorf("schema %d, fio %q, prefilled %v", r.SchemaVersion, r.FioVersion, r.Prefilled)
	}
	for _, res := range r.Results {
		if res.MBps <= 0 || res.IOPS <= 0 || res.LatP50us <= 0 || res.LatP50us > res.LatP99us || res.FractionOfSSD == nil {
			t.Fatalf("implausible result %+v", res)
		}
	}
	if len(r.Convergence) != len(cfg.WorkingSets)*2*4 || len(r.Overhead) != len(cfg.WorkingSets)*(2+4) {
		t.Errorf("%d convergence and %d overhead rows", len(r.Convergence), len(r.Overhead))
	}
}

func checkReportMarkdown(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Summary: runs to converge", "| 2Mi | cached |", "| 50% | raw-hdd |", "## Overhead", "## Runs: working set 50%, cached"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

func checkSVG(t *testing.T, path string, r *Report) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, data)
	series := PlotSeries(r)
	if len(series) != 2+2 { // cached at two working sets, SSD and HDD levels
		t.Fatalf("plot series %q, want 4", series)
	}
	for _, s := range series {
		if !texts[s] {
			t.Errorf("convergence.svg has no legend entry %q", s)
		}
	}
}
