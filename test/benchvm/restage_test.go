package main

import (
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

func TestRestagedRunIsJudgedAgainstItsColdWorkingSet(t *testing.T) {
	sel, err := bench.SelectTests([]string{"seq1m-q1t1-read"})
	if err != nil {
		t.Fatal(err)
	}
	test := sel[0].ID
	r := &bench.Report{Config: bench.Config{
		Targets: []bench.Target{{Name: "raw-hdd", Path: "/h"}, {Name: "raw-ssd", Path: "/s"}, {Name: "ssdcache", Path: "/c", DMDevice: "c"}},
		Runs:    3, Tests: sel, SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: test,
		WorkingSets: []bench.WorkingSet{{Label: "50%", Bytes: 64 << 20}, {Label: "50%" + restagedLabel, Bytes: 64 << 20}},
	}}
	add := func(ws string, run int, mbps, hit float64) { addRun(r, ws, test, run, 10, 100, mbps, hit) }
	add("50%", 1, 10, 0)
	add("50%", 2, 50, 0.96)
	add("50%", 3, 52, 0.99)
	// The machine ran slow after the restage: the raw HDD and SSD read at
	// half and 0.4 of their pace in the cold runs.
	addRun(r, "50%"+restagedLabel, test, 1, 5, 40, 49, 0.97)
	bench.Analyze(r)
	judgeAgainstColdSets(r)
	for _, w := range r.Warmth {
		if _, after := afterDisruption(w.WorkingSet); after {
			t.Errorf("warm-up row of %s, which ran once: its ceiling would be its own run", w.WorkingSet)
		}
	}
	md := restagedSection(r, map[string][]parts.Restage{"50%" + restagedLabel: {
		{Target: "ssdcache", DownSeconds: 1.5, UpSeconds: 12, WarmUpSeconds: 4.8, WarmBytes: 40e6, HotSetBytes: 50e6}, {Target: "lvmcache", DownSeconds: 0.5, UpSeconds: 0.7}}}, parts.Reboot{})
	for _, want := range []string{
		// 0.96 of the warm ceiling: 49 MB/s over the cold set's 51, not over
		// its own run.
		// Run 1 read 49 MB/s where the cold set's warm runs read 50 and 52.
		"| 50% restaged | ssdcache | seq1m-q1t1-read | 0.97 | 49.0 | 0.96 | 50.0-52.0 | 1.23 | 4.90 | 0.40 / 0.50 |",
		// 40 MB at the raw HDD's 10 MB/s would take 4 s: the restage took 3
		// times that, the warm-up itself 1.2 times. It copied 80 % of the
		// hot set.
		"| 50% restaged | ssdcache | 1.5 | 12.0 | 4.8 | 38.1 | 80.0 % | 3.00 | 1.20 |",
		"| 50% restaged | lvmcache | 0.5 | 0.7 | - | 0.0 | - | - | - |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(md, "Restaged (`<set> restaged`)") || strings.Contains(md, "Plugin restarted (") || strings.Contains(md, "Rebooted (") {
		t.Errorf("the section describes other steps than the restage its rows show:\n%s", md)
	}
}

// TestRepeatedStepsAreJudgedTogether: a step done three times gives three
// run 1 rows, each judged against the cold set's ceiling, and one median.
func TestRepeatedStepsAreJudgedTogether(t *testing.T) {
	sel, err := bench.SelectTests([]string{"rnd4k-q1t1-read"})
	if err != nil {
		t.Fatal(err)
	}
	test := sel[0].ID
	restarted := "50%" + restartedLabel
	r := &bench.Report{Config: bench.Config{
		Targets: []bench.Target{{Name: "raw-hdd", Path: "/h"}, {Name: "raw-ssd", Path: "/s"}, {Name: "ssdcache", Path: "/c", DMDevice: "c"}},
		Runs:    2, Tests: sel, SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: test,
		WorkingSets: []bench.WorkingSet{{Label: "50%", Bytes: 64 << 20}, {Label: restarted, Bytes: 64 << 20},
			{Label: repeatLabel(restarted, 2), Bytes: 64 << 20}, {Label: repeatLabel(restarted, 3), Bytes: 64 << 20}},
	}}
	add := func(ws string, run int, mbps, hit float64) { addRun(r, ws, test, run, 1, 25, mbps, hit) }
	add("50%", 1, 1, 0)
	add("50%", 2, 20, 1)
	add(restarted, 1, 15, 1)
	add(repeatLabel(restarted, 2), 1, 21, 1)
	add(repeatLabel(restarted, 3), 1, 19, 0.99)
	bench.Analyze(r)
	judgeAgainstColdSets(r)
	if cold, step, n, ok := disruption(repeatLabel(restarted, 3)); cold != "50%" || step != restartedLabel || n != 3 || !ok {
		t.Errorf("disruption(%q) = %q, %q, %d, %v", repeatLabel(restarted, 3), cold, step, n, ok)
	}
	md := restagedSection(r, nil, parts.Reboot{})
	for _, want := range []string{
		"| 50% plugin restarted #3 | ssdcache | rnd4k-q1t1-read | 0.99 | 19.0 | 0.95 | 20.0-20.0 | 0.76 | 19.00 | 1.00 / 1.00 |",
		// 0.75, 1.05 and 0.95 of the ceiling of 20 MB/s.
		"| 50% | plugin restarted | ssdcache | rnd4k-q1t1-read | 3 | 0.95 | 0.75-1.05 | 0.99 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	if strings.Count(md, "Plugin restarted (") != 1 {
		t.Errorf("the restart is not described once:\n%s", md)
	}
}

// TestRebootSectionSaysHowTheVMWentDown: the reboot's rows and its
// warm-up are read by how the VM went down, and a clean reboot the plugin
// had not marked its cache for says why the cache was filled anyway.
func TestRebootSectionSaysHowTheVMWentDown(t *testing.T) {
	sel, err := bench.SelectTests([]string{"seq1m-q8t1-read"})
	if err != nil {
		t.Fatal(err)
	}
	test := sel[0].ID
	rebooted := "1Gi" + rebootedLabel
	r := &bench.Report{Config: bench.Config{
		Targets: []bench.Target{{Name: "raw-hdd", Path: "/h"}, {Name: "raw-ssd", Path: "/s"}, {Name: "ssdcache", Path: "/c", DMDevice: "c"}},
		Runs:    2, Tests: sel, SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: test,
		WorkingSets: []bench.WorkingSet{{Label: "1Gi", Bytes: 1 << 30}, {Label: rebooted, Bytes: 1 << 30}},
	}}
	addRun(r, "1Gi", test, 1, 10, 100, 10, 0)
	addRun(r, "1Gi", test, 2, 10, 100, 90, 1)
	addRun(r, rebooted, test, 1, 10, 100, 88, 1)
	bench.Analyze(r)
	judgeAgainstColdSets(r)
	kept := map[string][]parts.Restage{rebooted: {{Target: "ssdcache", UpSeconds: 3, WarmUpSeconds: 0.2, HotSetBytes: 1 << 30}}}
	for name, c := range map[string]struct {
		reboot    parts.Reboot
		restages  map[string][]parts.Restage
		want, not []string
	}{
		"clean, marked": {parts.Reboot{Kind: parts.CleanReboot, Marked: true}, kept,
			[]string{"**a clean shutdown** (`-reboot-kind clean`)", "`dmsetup remove`", "had marked the cache", "| 1Gi rebooted | ssdcache | - | 3.0 | 0.2 | 0.0 | 0.0 % | - | - |"},
			[]string{"power cut", "had not marked"}},
		"clean, not marked": {parts.Reboot{Kind: parts.CleanReboot}, nil,
			[]string{"**a clean shutdown**", "the plugin had not marked it at SIGTERM"}, []string{"had marked the cache", "power cut"}},
		"power cut": {parts.Reboot{Kind: parts.PowerCut, Marked: true}, nil,
			[]string{"**a power cut for ssdcache** (`-reboot-kind power-cut`)", "safety rule 2"}, []string{"clean shutdown**", "`dmsetup remove`", "had marked the cache"}},
	} {
		md := restagedSection(r, c.restages, c.reboot)
		for _, want := range c.want {
			if !strings.Contains(md, want) {
				t.Errorf("%s: section lacks %q:\n%s", name, want, md)
			}
		}
		for _, not := range c.not {
			if strings.Contains(md, not) {
				t.Errorf("%s: section says %q:\n%s", name, not, md)
			}
		}
	}
}

// addRun adds a run of test to r: the raw HDD and SSD at hdd and ssd MB/s,
// ssdcache at mbps with its hit ratio.
func addRun(r *bench.Report, ws, test string, run int, hdd, ssd, mbps, hit float64) {
	for target, m := range map[string]float64{"raw-hdd": hdd, "raw-ssd": ssd} {
		r.Results = append(r.Results, bench.Result{WorkingSet: ws, Target: target, Run: run, Test: test, Measurement: bench.Measurement{MBps: m}})
	}
	r.Results = append(r.Results, bench.Result{WorkingSet: ws, Target: "ssdcache", Run: run, Test: test,
		Measurement: bench.Measurement{MBps: mbps}, HitRatio: &hit})
}
