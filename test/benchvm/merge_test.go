package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// Parts of different targets side by side would compare unlike things
// without a word in the report.
func TestMergeRefusesDifferentTargets(t *testing.T) {
	a := []bench.Target{{Name: "raw-hdd", Path: "/h"}, {Name: "lvmcache", Path: "/c", DMDevice: "c"}}
	if err := sameTargets(a, []bench.Target{{Name: "raw-hdd", Path: "/h2"}, {Name: "lvmcache", Path: "/c2", DMDevice: "c2"}}); err != nil {
		t.Errorf("the same targets on other devices refused: %v", err)
	}
	for _, b := range [][]bench.Target{a[:1], {a[0], {Name: "bcache", Path: "/c", DMDevice: "c"}}, {a[0], {Name: "lvmcache", Path: "/c"}}} {
		if err := sameTargets(a, b); err == nil {
			t.Errorf("%+v accepted as the same targets as %+v", b, a)
		}
	}
}

func TestOptionsRefuseWhatTheGuestWouldRefuseLate(t *testing.T) {
	good := options{workingSets: []string{"25%", "50%"}, treeWorkingSet: "50%", rebootWorkingSet: "50%", rebootKind: parts.CleanReboot, runs: 6, restageRuns: 1, eventRepeats: 1, cacheMiB: 256}
	if err := good.validate(); err != nil {
		t.Fatalf("default options refused: %v", err)
	}
	for name, edit := range map[string]func(*options){
		"tree size":         func(o *options) { o.treeWorkingSet = "5O%" },
		"working set":       func(o *options) { o.workingSets = []string{"25%", "50%", "128Mx"} },
		"larger than cache": func(o *options) { o.workingSets = []string{"50%", "512Mi"} },
		"volume too small":  func(o *options) { o.cacheMiB, o.volumeGiB = 1024, 1 },
		"reboot set absent": func(o *options) { o.rebootWorkingSet = "75%" },
		"reboot kind":       func(o *options) { o.rebootKind = "hard" },
		"negative runs":     func(o *options) { o.restartRuns = -1 },
		"no step done":      func(o *options) { o.eventRepeats = 0 },
		"bad io limit":      func(o *options) { o.ioLimit = "32Mx" },
		"zones not of 100":  func(o *options) { o.readTests, o.scatterZones = bench.ScatteredTest.ID, 30 },
		"set not in zones": func(o *options) {
			o.readTests, o.workingSets, o.rebootWorkingSet = bench.ScatteredTest.ID, []string{"3Mi"}, ""
		},
	} {
		o := good
		edit(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: %+v accepted", name, o)
		}
	}
	repeated := good
	repeated.eventRepeats, repeated.restartRuns = 3, 1
	var labels []string
	for _, p := range invocations(repeated) {
		labels = append(labels, filepath.Base(p.dir)+"="+p.relabel)
	}
	if got, want := strings.Join(labels[:7], " "), "ws-25= ws-25-restage=25% restaged ws-25-restart=25% plugin restarted "+
		"ws-25-restage-2=25% restaged #2 ws-25-restart-2=25% plugin restarted #2 ws-25-restage-3=25% restaged #3 ws-25-restart-3=25% plugin restarted #3"; got != want {
		t.Errorf("parts of a working set whose steps are done three times:\n got %s\nwant %s", got, want)
	}
	scattered := good
	scattered.readTests, scattered.scatterZones, scattered.ioLimit = bench.ScatteredTest.ID, 100, "32Mi"
	scattered.workingSets, scattered.rebootWorkingSet = []string{"100Mi"}, ""
	if err := scattered.validate(); err != nil {
		t.Errorf("a scattered test of 100 zones of 1 MiB refused: %v", err)
	}
	sized := good
	sized.workingSets, sized.rebootWorkingSet, sized.volumeGiB = []string{"64Mi", "256Mi"}, "", 4096
	if err := sized.validate(); err != nil {
		t.Errorf("working sets given as sizes up to the cache on a 4 TiB volume refused: %v", err)
	}
	none := good
	none.treeWorkingSet, none.rebootWorkingSet = "", ""
	if err := none.validate(); err != nil {
		t.Errorf("no tree and no reboot step refused: %v", err)
	}
}

// The report's header gives the run's span, whatever order its parts ran in.
func TestMergedReportSpansEveryPart(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 12, 4, 19, min, 0, 0, time.UTC) }
	var invocations []part
	for _, span := range [][2]int{{0, 10}, {40, 50}, {20, 30}} { // 25 %, then 50 % run last, then 75 %
		dir := t.TempDir()
		r := bench.Report{StartedAt: at(span[0]), FinishedAt: at(span[1]), Config: bench.Config{
			Targets: []bench.Target{{Name: "raw-hdd", Path: "/h"}}, Tests: []bench.Test{{ID: "seq1m-q1t1-read"}}}}
		if err := bench.WriteFiles(dir, &r); err != nil {
			t.Fatal(err)
		}
		invocations = append(invocations, part{dir: dir})
	}
	merged, _, err := merge(invocations)
	if err != nil {
		t.Fatal(err)
	}
	if !merged.StartedAt.Equal(at(0)) || !merged.FinishedAt.Equal(at(50)) {
		t.Errorf("merged report spans %v to %v, want %v to %v", merged.StartedAt, merged.FinishedAt, at(0), at(50))
	}
}
