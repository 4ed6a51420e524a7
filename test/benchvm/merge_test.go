package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

func writePart(t *testing.T, dir, ws string, runs int, tests []string, mbps map[string]float64) part {
	t.Helper()
	sel, err := bench.SelectTests(tests)
	if err != nil {
		t.Fatal(err)
	}
	r := &bench.Report{Config: bench.Config{
		Targets: []bench.Target{{Name: "raw-hdd", Path: "/h"}, {Name: "raw-ssd", Path: "/s"}, {Name: "lvmcache", Path: "/c", DMDevice: "c"}},
		Runs:    runs, WorkingSets: []bench.WorkingSet{{Label: ws, Bytes: 64 << 20}}, Tests: sel,
		SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: sel[0].ID,
	}}
	for run := 1; run <= runs; run++ {
		for _, target := range []string{"raw-hdd", "raw-ssd", "lvmcache"} {
			for _, test := range sel {
				r.Results = append(r.Results, bench.Result{WorkingSet: ws, Target: target, Run: run, Test: test.ID,
					Measurement: bench.Measurement{MBps: mbps[target] * float64(run), LatP50us: 100}})
			}
		}
	}
	dir = filepath.Join(t.TempDir(), dir)
	if err := bench.WriteFiles(dir, r); err != nil {
		t.Fatal(err)
	}
	return part{dir: dir}
}

func TestMergeKeepsWorkingSetsApartAndReanalyses(t *testing.T) {
	mbps := map[string]float64{"raw-hdd": 10, "raw-ssd": 100, "lvmcache": 20}
	a := writePart(t, "ws-25", "25%", 6, []string{"seq1m-q1t1-read"}, mbps)
	b := writePart(t, "ws-50", "50%", 6, []string{"seq1m-q1t1-read"}, mbps)
	w := writePart(t, "writes", "25%", 1, []string{"seq1m-q1t1-write"}, mbps)
	w.relabel = "cold writes (25%)"
	r, err := merge([]part{a, b, w})
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, ws := range r.Config.WorkingSets {
		labels = append(labels, ws.Label)
	}
	if got, want := len(labels), 3; got != want || labels[2] != "cold writes (25%)" {
		t.Fatalf("working sets %v, want 25%%, 50%%, cold writes (25%%)", labels)
	}
	if len(r.Config.Tests) != 2 || r.Config.Tests[0].ID != "seq1m-q1t1-read" || r.Config.Tests[1].ID != "seq1m-q1t1-write" {
		t.Fatalf("tests %+v, want the read then the write", r.Config.Tests)
	}
	if len(r.Results) != 6*3+6*3+3 {
		t.Fatalf("%d results, want %d", len(r.Results), 6*3+6*3+3)
	}
	var coldWrite bool
	for _, o := range r.Overhead {
		if o.WorkingSet == "cold writes (25%)" && o.Test == "seq1m-q1t1-write" && o.Kind == bench.ColdMiss {
			coldWrite = o.ThroughputRatio == 2 // lvmcache 20 MB/s against the raw HDD's 10 in run 1
		}
	}
	convergedSets := map[string]bool{}
	for _, c := range r.Convergence {
		convergedSets[c.WorkingSet] = true
	}
	if !coldWrite {
		t.Errorf("no cold-miss write row of ratio 2 for lvmcache: %+v", r.Overhead)
	}
	if !convergedSets["25%"] || !convergedSets["50%"] || convergedSets["cold writes (25%)"] {
		t.Errorf("convergence rows for %v, want 25%% and 50%% only (no read tests in the cold writes)", convergedSets)
	}
	if _, err := os.Stat(filepath.Join(a.dir, bench.ReportJSON)); err != nil {
		t.Fatal(err)
	}
}

func TestMergeRefusesDifferentTargets(t *testing.T) {
	a := writePart(t, "a", "25%", 1, []string{"seq1m-q1t1-read"}, map[string]float64{})
	b := writePart(t, "b", "50%", 1, []string{"seq1m-q1t1-read"}, map[string]float64{})
	r, _ := parts.ReadReport(b.dir)
	r.Config.Targets[2].Name = "bcache"
	if err := bench.WriteFiles(b.dir, r); err != nil {
		t.Fatal(err)
	}
	if _, err := merge([]part{a, b}); err == nil {
		t.Fatal("merged reports of different targets")
	}
}

func TestOptionsRefuseWhatTheGuestWouldRefuseLate(t *testing.T) {
	good := options{workingSets: []string{"25%", "50%"}, treeWorkingSet: "50%", rebootWorkingSet: "50%", runs: 6, restageRuns: 1, cacheMiB: 256}
	if err := good.validate(); err != nil {
		t.Fatalf("default options refused: %v", err)
	}
	for name, edit := range map[string]func(*options){
		"tree size":         func(o *options) { o.treeWorkingSet = "5O%" },
		"working set":       func(o *options) { o.workingSets = []string{"128Mi"} },
		"reboot set absent": func(o *options) { o.rebootWorkingSet = "75%" },
		"negative runs":     func(o *options) { o.restartRuns = -1 },
	} {
		o := good
		edit(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, o)
		}
	}
	none := good
	none.treeWorkingSet, none.rebootWorkingSet = "", ""
	if err := none.validate(); err != nil {
		t.Errorf("no tree and no reboot step refused: %v", err)
	}
}

// The host collects and merges exactly the parts the guest writes, in the
// report's order: each set, its restaged, restarted and rebooted parts, the
// cold writes, the tree.
func TestPartNamesFollowTheSteps(t *testing.T) {
	o := options{workingSets: []string{"25%", "50%"}, restageRuns: 1, restartRuns: 1, rebootWorkingSet: "50%", treeWorkingSet: "50%"}
	want := []string{"ws-25", "ws-25-restage", "ws-25-restart", "ws-50", "ws-50-restage", "ws-50-restart", "ws-50-reboot", "writes", "tree"}
	if got := partNames(o); !slices.Equal(got, want) {
		t.Errorf("parts %v, want %v", got, want)
	}
	o.restartRuns, o.rebootWorkingSet, o.treeWorkingSet = 0, "", ""
	want = []string{"ws-25", "ws-25-restage", "ws-50", "ws-50-restage", "writes"}
	if got := partNames(o); !slices.Equal(got, want) {
		t.Errorf("without restart, reboot and tree steps: parts %v, want %v", got, want)
	}
}
