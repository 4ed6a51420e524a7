package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
)

// inClusterConfig is the chart's bench Job: one target, one volume per
// working set when perWorkingSet, else one volume for all of them.
func inClusterConfig(t *testing.T, perWorkingSet bool) Config {
	t.Helper()
	path := "/data/bench.dat"
	if perWorkingSet {
		path = "/data/ws-" + WorkingSetPlaceholder + "/bench.dat"
	}
	sets, err := ParseWorkingSets([]string{"25%", "50%", "75%"}, 64<<20, !perWorkingSet)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Targets: []Target{{Name: "volume", Path: path}}, Runs: 1, WorkingSets: sets,
		Tests: []Test{Matrix()[0]}, RandSeed: 7, ConvergeFraction: 0.9, PlotTest: "seq1m-q8t1-read"}
}

// TestEachWorkingSetReadsItsOwnVolume: with {ws} in the path, each working
// set lays out and reads a file on its own volume (so a cache of its own),
// and the report says each began on a fresh cache.
func TestEachWorkingSetReadsItsOwnVolume(t *testing.T) {
	h := newHarness()
	b, err := New(inClusterConfig(t, true), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var prefilled, read []string
	for _, c := range h.fio.calls {
		file := argValue(c, "--filename") + " size=" + argValue(c, "--size") + " offset=" + argValue(c, "--offset")
		if argValue(c, "--name") == "prefill" {
			prefilled = append(prefilled, file)
		} else {
			read = append(read, file)
		}
	}
	want := []string{"/data/ws-1/bench.dat size=16777216 offset=0", "/data/ws-2/bench.dat size=33554432 offset=0", "/data/ws-3/bench.dat size=50331648 offset=0"}
	if !slices.Equal(prefilled, want) || !slices.Equal(read, want) {
		t.Errorf("laid out %q and read %q; want each working set on its own file, from offset 0: %q", prefilled, read, want)
	}
	for _, ws := range r.Config.WorkingSets {
		if len(ws.CacheAtStart) != 1 || !ws.CacheAtStart[0].Fresh() {
			t.Errorf("working set %s: cache at start %+v, want fresh (own path, laid out by this run)", ws.Label, ws.CacheAtStart)
		}
	}
	if b.cfg.WorkingSets[0].CacheAtStart != nil {
		t.Errorf("the plan's working sets were changed: %+v", b.cfg.WorkingSets[0])
	}
	md := markdown(t, r)
	if got := strings.Count(md, "fresh: its own volume, laid out by this run"); got != 3 {
		t.Errorf("report.md says 'fresh' %d times, want once per working set:\n%s", got, md)
	}
}

// TestSharedVolumeIsReportedNotFresh: working sets one after another on one
// volume share its cache; the report says so for every set after the first.
func TestSharedVolumeIsReportedNotFresh(t *testing.T) {
	h := newHarness()
	b, err := New(inClusterConfig(t, false), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var after [][]string
	for _, ws := range r.Config.WorkingSets {
		cs := ws.CacheAtStart[0]
		if cs.OwnPath || cs.Fresh() {
			t.Errorf("working set %s: %+v, want a shared path, never fresh", ws.Label, cs)
		}
		after = append(after, cs.After)
	}
	if len(after[0]) != 0 || !slices.Equal(after[1], []string{"25%"}) || !slices.Equal(after[2], []string{"25%", "50%"}) {
		t.Errorf("working sets read before each: %q; want [] [25%%] [25%% 50%%]", after)
	}
	md := markdown(t, r)
	if !strings.Contains(md, "**not fresh**: the same volume served working sets 25%, 50% before") {
		t.Errorf("report.md does not say that the 75%% set started on the cache the others filled:\n%s", md)
	}
	if i, j := strings.Index(md, "## Cache at the start"), strings.Index(md, "## Runs"); i < 0 || i > j {
		t.Errorf("the cache-at-start section is missing or after the runs")
	}
}

// TestPartialPassesAreCountedAndShown: a test that read a quarter of its
// working set (a runtime limit) is a quarter pass in report.json and in
// report.md, and the header says how many tests were cut.
func TestPartialPassesAreCountedAndShown(t *testing.T) {
	h := newHarness()
	cfg := inClusterConfig(t, true)
	cfg.WorkingSets = cfg.WorkingSets[2:] // 48 MiB; the recorded fio reads 16 MiB
	cfg.Runs = 2
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range r.Results {
		if f := res.FractionOfWorkingSet; f == nil || *f < 0.333 || *f > 0.334 {
			t.Errorf("result %d covered %v of its working set, want 16/48", i, f)
		}
		if res.Pass != 1 {
			t.Errorf("result %d is pass %d; two thirds of a pass each make pass 1 twice", i, res.Pass)
		}
	}
	if n, least, most := PartialPasses(r); n != 2 || least != most {
		t.Errorf("partial passes = %d (%v to %v), want 2", n, least, most)
	}
	md := markdown(t, r)
	if !strings.Contains(md, "**2 of 2 tests covered only part of their working set** (33% to 33% of it") {
		t.Errorf("report.md's header does not say the passes were cut short:\n%s", md)
	}
	if !strings.Contains(md, "| 16 | 0.33 |") {
		t.Errorf("the runs table does not show MiB read and the share of the set:\n%s", md)
	}
}

func markdown(t *testing.T, r *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
