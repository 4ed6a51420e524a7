package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// podReport is what the chart's Job measures: one volume, no raw devices;
// with counters, as with -dm-cache, each read test of run k hits k*10 times
// out of 40 and promotes 5-k blocks.
func podReport(t *testing.T, counters bool, mbps ...float64) *Report {
	t.Helper()
	cfg := testConfig(t)
	cfg.Targets = []Target{{Name: "volume", Path: "/data/bench.dat"}}
	cfg.SSDReference, cfg.HDDReference = "", ""
	cfg.WorkingSets = cfg.WorkingSets[:1]
	cfg.Tests = readTests(cfg)
	cfg.Runs = len(mbps)
	r := &Report{SchemaVersion: SchemaVersion, Config: cfg}
	for i, v := range mbps {
		run := i + 1
		for _, test := range cfg.Tests {
			res := Result{WorkingSet: "4Mi", Target: "volume", Run: run, Test: test.ID, Measurement: Measurement{MBps: v, IOBytes: 1}}
			if counters {
				res.Counters = &Counters{ReadHits: uint64(run * 10), ReadMisses: uint64(40 - run*10), Promotions: uint64(5 - run)}
				res.HitRatio = hitRatio(*res.Counters, Read) // as the runner sets it
			}
			r.Results = append(r.Results, res)
		}
	}
	Analyze(r)
	return r
}

func TestReportWithoutSSDReferenceLeadsWithSpeedup(t *testing.T) {
	var md bytes.Buffer
	if err := WriteMarkdown(&md, podReport(t, true, 20, 40, 70)); err != nil {
		t.Fatal(err)
	}
	s := md.String()
	summary := strings.Index(s, "## Summary: speedup over run 1")
	if summary < 0 || summary > strings.Index(s, "## Runs:") {
		t.Fatalf("report.md does not lead with the speedup summary:\n%s", s)
	}
	for _, want := range []string{
		"### Working set 4Mi, volume",
		"**Run 3: 3.50× run 1** on SEQ1M Q8T1 read (70.0 against 20.0 MB/s); read hit ratio 0.75, 8 promotions in run 3.",
		"| run | SEQ1M Q8T1 read MB/s | SEQ1M Q1T1 read MB/s | RND4K Q32T1 read MB/s | RND4K Q1T1 read MB/s | read hit ratio | promotions |",
		"| 1 | 20.0 (1.00×) | 20.0 (1.00×) | 20.0 (1.00×) | 20.0 (1.00×) | 0.25 | 16 |",
		"| 2 | 40.0 (2.00×) | 40.0 (2.00×) | 40.0 (2.00×) | 40.0 (2.00×) | 0.50 | 12 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report.md lacks %q:\n%s", want, s)
		}
	}
	for _, unwanted := range []string{"No convergence", "converged: first run", "## References"} {
		if strings.Contains(s, unwanted) {
			t.Errorf("report.md without an SSD reference mentions %q:\n%s", unwanted, s)
		}
	}
}

func TestSpeedupWithoutCountersOrReads(t *testing.T) {
	var md bytes.Buffer
	if err := WriteMarkdown(&md, podReport(t, false, 10, 15)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"**Run 2: 1.50× run 1** on SEQ1M Q8T1 read (15.0 against 10.0 MB/s); no dm-cache counters (-dm-cache): the binding's hit ratio is in `kubectl get cachebindings`.",
		"| 2 | 15.0 (1.50×) | 15.0 (1.50×) | 15.0 (1.50×) | 15.0 (1.50×) | - | - |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("without counters report.md lacks %q:\n%s", want, md.String())
		}
	}
	writes := podReport(t, false, 10)
	writes.Config.Tests = Matrix()[4:]
	writes.Results = nil
	md.Reset()
	if err := WriteMarkdown(&md, writes); err != nil || !strings.Contains(md.String(), "No speedup: it needs read tests") {
		t.Errorf("write-only report: %v\n%s", err, md.String())
	}
}

// TestPlotWithoutSSDReferenceHasReadableAxes: the in-cluster plot names its
// axes with units and numbers every run.
func TestPlotWithoutSSDReferenceHasReadableAxes(t *testing.T) {
	r := podReport(t, true, 20, 40, 70, 75)
	r.Config.Interval = 30 * time.Second
	var svg bytes.Buffer
	if err := WritePlot(&svg, r); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, svg.Bytes())
	for _, w := range []string{"run (pass over the working set; 1: cold cache; 30s pause between runs)", "MB/s (10^6 bytes/s)",
		"1", "2", "3", "4", "volume, working set 4Mi"} {
		if !texts[w] {
			t.Errorf("SVG has no text %q; texts: %v", w, texts)
		}
	}
}
