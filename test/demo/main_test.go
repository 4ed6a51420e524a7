package main

import (
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

func demoReport(runs int, counters bool) *bench.Report {
	tests, _ := bench.SelectTests([]string{"rnd4k-q1t1-read"})
	r := &bench.Report{Config: bench.Config{Runs: runs, Tests: tests}}
	frac := 0.5
	for run := 1; run <= runs; run++ {
		res := bench.Result{Target: volumeTarget, Test: "rnd4k-q1t1-read", Run: run, FractionOfSSD: &frac}
		if counters {
			res.Counters = &bench.Counters{}
		}
		r.Results = append(r.Results, res)
	}
	return r
}

func TestCheck(t *testing.T) {
	if err := check(demoReport(6, true), 6); err != nil {
		t.Fatalf("complete report refused: %v", err)
	}
	if err := check(demoReport(6, false), 6); err == nil || !strings.Contains(err.Error(), "not a dm-cache device") {
		t.Fatalf("report without dm-cache counters: err = %v", err)
	}
	if err := check(demoReport(4, true), 6); err == nil {
		t.Fatal("report with 4 of 6 runs accepted")
	}
	failed := demoReport(6, true)
	failed.Error = "fio: exit 1"
	if err := check(failed, 6); err == nil {
		t.Fatal("report of a failed benchmark accepted")
	}
}
