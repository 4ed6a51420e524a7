package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"slices"
	"strings"
	"testing"
)

// syntheticReport builds results with chosen MB/s so the derived figures can
// be checked exactly. mbps[target][run-1] applies to every test.
func syntheticReport(t *testing.T, runs int, mbps map[string][]float64) *Report {
	t.Helper()
	cfg := testConfig(t)
	cfg.Runs = runs
	cfg.WorkingSets = cfg.WorkingSets[:1]
	r := &Report{SchemaVersion: SchemaVersion, Config: cfg}
	for run := 1; run <= runs; run++ {
		for _, target := range cfg.Targets {
			for _, test := range cfg.Tests {
				v := mbps[target.Name][run-1]
				res := Result{WorkingSet: "4Mi", Target: target.Name, Run: run, Test: test.ID,
					Measurement: Measurement{MBps: v, IOPS: v, LatP50us: 1000 / v, LatP99us: 2000 / v, IOBytes: 4 << 20}}
				if target.DMDevice != "" {
					hits := float64(run) / float64(runs)
					res.HitRatio = &hits
					res.Counters = &Counters{Promotions: uint64(run)}
				}
				r.Results = append(r.Results, res)
			}
		}
	}
	Analyze(r)
	return r
}

func TestAnalyzeConvergence(t *testing.T) {
	r := syntheticReport(t, 4, map[string][]float64{
		"raw-ssd":  {100, 90, 110, 100}, // median 100
		"raw-hdd":  {10, 10, 10, 10},
		"ssdcache": {12, 50, 95, 89},
	})
	byKey := map[string]Convergence{}
	for _, c := range r.Convergence {
		byKey[c.Target+" "+c.Test] = c
	}
	if len(r.Convergence) != 2*4 {
		t.Fatalf("%d convergence rows, want read tests x (hdd, ssdcache), not the SSD reference: %+v", len(r.Convergence), r.Convergence)
	}
	c := byKey["ssdcache seq1m-q8t1-read"]
	if c.RunsToConverge == nil || *c.RunsToConverge != 3 {
		t.Errorf("runs to converge = %v, want 3 (first run at or above 0.9 of the median)", c.RunsToConverge)
	}
	if c.LastFractionOfSSD == nil || *c.LastFractionOfSSD != 0.89 {
		t.Errorf("last fraction = %v, want 0.89", c.LastFractionOfSSD)
	}
	if h := byKey["raw-hdd rnd4k-q1t1-read"]; h.RunsToConverge != nil {
		t.Errorf("raw HDD converged at run %d", *h.RunsToConverge)
	}
}

func TestAnalyzeFractionsAndReferences(t *testing.T) {
	r := syntheticReport(t, 3, map[string][]float64{
		"raw-ssd": {200, 100, 300}, "raw-hdd": {20, 10, 30}, "ssdcache": {50, 100, 150},
	})
	for _, res := range r.Results {
		if res.Target != "ssdcache" {
			continue
		}
		if *res.FractionOfSSD != res.MBps/200 || *res.FractionOfHDD != res.MBps/20 {
			t.Fatalf("fractions %v, %v for %v MB/s; want against the medians 200 and 20", *res.FractionOfSSD, *res.FractionOfHDD, res.MBps)
		}
	}
	if len(r.References) != len(Matrix()) || *r.References[0].SSDMBps != 200 || *r.References[0].HDDMBps != 20 {
		t.Fatalf("references %+v", r.References)
	}
}

func TestAnalyzeOverhead(t *testing.T) {
	r := syntheticReport(t, 2, map[string][]float64{
		"raw-ssd": {100, 100}, "raw-hdd": {10, 10}, "ssdcache": {8, 80},
	})
	got := map[string]Overhead{}
	for _, o := range r.Overhead {
		got[string(o.Kind)+" "+o.Test] = o
	}
	if len(r.Overhead) != 2+4 {
		t.Fatalf("%d overhead rows, want 2 cache-hit and 4 cold-miss: %+v", len(r.Overhead), r.Overhead)
	}
	hit := got["cache-hit rnd4k-q1t1-read"]
	if hit.Run != 2 || hit.Reference != "raw-ssd" || hit.ThroughputRatio != 0.8 || hit.LatencyP50Ratio != 1.25 || *hit.HitRatio != 1 {
		t.Errorf("cache-hit row %+v", hit)
	}
	miss := got["cold-miss seq1m-q1t1-write"]
	if miss.Run != 1 || miss.Reference != "raw-hdd" || miss.ThroughputRatio != 0.8 {
		t.Errorf("cold-miss row %+v", miss)
	}
}

func TestAnalyzeWithoutReferences(t *testing.T) {
	r := syntheticReport(t, 2, map[string][]float64{"raw-ssd": {1, 1}, "raw-hdd": {1, 1}, "ssdcache": {1, 1}})
	r.Config.SSDReference, r.Config.HDDReference = "", ""
	Analyze(r)
	if len(r.Convergence)+len(r.Overhead)+len(r.References) != 0 || r.Results[0].FractionOfSSD != nil {
		t.Fatalf("derived figures without references: %+v %+v %+v", r.Convergence, r.Overhead, r.References)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil || !strings.Contains(md.String(), "## Summary: speedup over run 1") ||
		strings.Contains(md.String(), "No convergence") {
		t.Fatalf("markdown without references: %v\n%s", err, md.String())
	}
}

func TestWriteMarkdownTables(t *testing.T) {
	r := syntheticReport(t, 3, map[string][]float64{
		"raw-ssd": {100, 100, 100}, "raw-hdd": {10, 10, 10}, "ssdcache": {10, 95, 99},
	})
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	s := md.String()
	for _, want := range []string{
		"| 4Mi | ssdcache | run 2 (last 0.99) |",
		"| 4Mi | raw-hdd | not converged (last 0.10) |",
		"## Runs: working set 4Mi, ssdcache",
		// Run 3's first read test is the ninth pass: four read tests a run.
		"| 3 | 9 | SEQ1M Q8T1 read | 99.0 |",
		"| 4Mi | ssdcache | SEQ1M Q8T1 read | 99.0 | 9 | 1.00 |",
		"| 4Mi | ssdcache | cache-hit | SEQ1M Q1T1 read | 3 | raw-ssd | 0.99 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if strings.Contains(s, "| 4Mi | raw-ssd | run") {
		t.Error("the SSD reference must not appear in the convergence summary")
	}
}

func TestWritePlotDrawsOneLinePerSeries(t *testing.T) {
	r := syntheticReport(t, 3, map[string][]float64{
		"raw-ssd": {100, 100, 100}, "raw-hdd": {10, 10, 10}, "ssdcache": {10, 95, 99},
	})
	var svg bytes.Buffer
	if err := WritePlot(&svg, r); err != nil {
		t.Fatal(err)
	}
	want := []string{"ssdcache, working set 4Mi", "raw SSD (raw-ssd), median of all runs", "raw HDD (raw-hdd), median of all runs"}
	if got := PlotSeries(r); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("series %q, want %q", got, want)
	}
	texts := svgTexts(t, svg.Bytes())
	for _, w := range append(want, "run (pass over the working set; 1: cold cache)", "MB/s (10^6 bytes/s)", "1", "2", "3") {
		if !texts[w] {
			t.Errorf("SVG has no text %q; texts: %v", w, texts)
		}
	}
}

// svgTexts parses the SVG as XML and returns the content of its text elements.
func svgTexts(t *testing.T, svg []byte) map[string]bool {
	t.Helper()
	texts := map[string]bool{}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts[strings.TrimSpace(string(tok))] = true
			}
		case xml.EndElement:
			inText = false
		}
	}
}

func TestWarmthCountsPassesAgainstTheWarmCeiling(t *testing.T) {
	cfg := testConfig(t)
	cfg.WorkingSets = cfg.WorkingSets[:1] // 4 MiB
	// The third read test never ran here, as in make bench's merged report
	// where a working set ran some of the tests: it gets no row.
	cfg.Tests = []Test{Matrix()[0], Matrix()[1], Matrix()[3]}
	r := &Report{Config: cfg}
	add := func(target string, run int, test Test, mbps float64, ioBytes int64, hits *float64) {
		r.Results = append(r.Results, Result{WorkingSet: "4Mi", Target: target, Run: run, Test: test.ID,
			Measurement: Measurement{MBps: mbps, IOBytes: ioBytes}, HitRatio: hits})
	}
	ratio := func(f float64) *float64 { return &f }
	seq, seqQ1 := cfg.Tests[0], cfg.Tests[1]
	for run, c := range []struct {
		mbps  float64
		bytes int64
		hits  float64
	}{
		{10, 4 << 20, 0}, {80, 2 << 20, 0.92}, {98, 4 << 20, 0.97}, {100, 4 << 20, 1}, {99, 4 << 20, 1},
	} {
		hddSeq := 20.0 // the median
		if run == 0 {
			hddSeq = 16 // the raw HDD's own first read of the data
		}
		add("raw-hdd", run+1, seq, hddSeq, 4<<20, nil)
		add("raw-hdd", run+1, seqQ1, 20, 4<<20, nil)
		add("ssdcache", run+1, seq, c.mbps, c.bytes, ratio(c.hits))
		add("ssdcache", run+1, seqQ1, c.mbps, 4<<20, ratio(c.hits))
	}
	Analyze(r)
	var passes []int
	for _, res := range r.Results {
		if res.Target == "ssdcache" && res.Test == seq.ID {
			passes = append(passes, res.Pass)
		}
	}
	// Run 2's first test read half the working set, so run 3 starts pass 4, not 5.
	if want := []int{1, 3, 4, 6, 8}; !slices.Equal(passes, want) {
		t.Errorf("passes of %s: %v, want %v", seq.ID, passes, want)
	}
	w := r.Warmth[0]
	if w.Target != "ssdcache" || w.Test != seq.ID || len(r.Warmth) != 2 {
		t.Fatalf("warmth %+v, want one row per read test the dm-cache target ran", r.Warmth)
	}
	// Ceiling: median of the runs at a hit ratio of 0.95 or more (98, 100, 99).
	if w.CeilingMBps == nil || *w.CeilingMBps != 99 {
		t.Errorf("ceiling %v, want 99", w.CeilingMBps)
	}
	// Run 2 hit 0.92 but ran at 80/99 of the ceiling: warm from run 3, pass 4.
	if w.PassToWarm == nil || *w.PassToWarm != 4 {
		t.Errorf("warm at pass %v, want 4", w.PassToWarm)
	}
	if w.FirstPassOfHDD == nil || *w.FirstPassOfHDD != 0.5 {
		t.Errorf("pass 1 of raw HDD %v, want 10/20", w.FirstPassOfHDD)
	}
	if w.FirstPassOfHDDFirst == nil || *w.FirstPassOfHDDFirst != 10.0/16 {
		t.Errorf("pass 1 of raw HDD's run 1 %v, want 10/16", w.FirstPassOfHDDFirst)
	}
	if f := r.Results[2].FractionOfCeiling; f == nil || *f != 10.0/99 {
		t.Errorf("run 1's fraction of the ceiling %v, want 10/99", f)
	}
}
