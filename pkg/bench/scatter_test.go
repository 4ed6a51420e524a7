package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestPlanScatterSpreadsZonesOverTheWholeTarget(t *testing.T) {
	p, err := PlanScatter(4<<40, 400<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	// 4 TiB / 100 = 43,980,465,111 bytes, rounded down to whole MiB.
	if p.HotPerZoneBytes != 4<<20 || p.ZoneStrideBytes != 41943<<20 || p.SpanBytes() != 100*(41943<<20) || p.HotBytes() != 400<<20 {
		t.Errorf("plan %+v (span %d): want 4 MiB hot every 41943 MiB", p, p.SpanBytes())
	}
	for name, c := range map[string]struct {
		device, hot int64
		zones       int
	}{
		"zones not dividing 100":       {4 << 40, 300 << 20, 30},
		"no zones":                     {4 << 40, 400 << 20, 0},
		"more zones than percentages":  {4 << 40, 400 << 20, 200},
		"hot bytes not in whole pages": {4 << 40, 100<<20 + 4096, 100},
		"hot part larger than a zone":  {64 << 20, 100 << 20, 100},
	} {
		if p, err := PlanScatter(c.device, c.hot, c.zones); err == nil {
			t.Errorf("%s: planned %+v", name, p)
		}
	}
}

// fio's zoned_abs: each hot part gets an equal whole percentage, each cold
// part 0 %, and the zones add up to the span fio's job covers.
func TestScatterDistributionCoversTheSpan(t *testing.T) {
	p := ScatterPlan{Zones: 4, ZoneStrideBytes: 10 << 20, HotPerZoneBytes: 1 << 20}
	want := "zoned_abs:25/1048576:0/9437184:25/1048576:0/9437184:25/1048576:0/9437184:25/1048576:0/9437184"
	if got := p.fioDistribution(); got != want {
		t.Errorf("distribution\n got %s\nwant %s", got, want)
	}
	full := ScatterPlan{Zones: 2, ZoneStrideBytes: 1 << 20, HotPerZoneBytes: 1 << 20}
	if got := full.fioDistribution(); got != "zoned_abs:50/1048576:50/1048576" {
		t.Errorf("zones without a cold part: %s", got)
	}
	args := fioJobSpec{Path: "/dev/x", Size: p.SpanBytes(), Test: ScatteredTest, Distribution: p.fioDistribution(), IOLog: "/tmp/a:b"}.args()
	for _, want := range []string{"--rw=randread", "--bs=4096", "--iodepth=32", "--offset=0", "--size=41943040", "--random_distribution=" + want, `--write_iolog=/tmp/a\:b`} {
		if !strings.Contains(strings.Join(args, " "), want) {
			t.Errorf("fio args %q lack %s", args, want)
		}
	}
}

// A log as fio 3.33 writes it (--write_iolog, version 3).
func iolog(offsets ...int64) []byte {
	var b strings.Builder
	b.WriteString("fio version 3 iolog\n185 /dev/x add\n651 /dev/x open\n")
	for i, off := range offsets {
		fmt.Fprintf(&b, "%d /dev/x read %d 4096\n", 700+i, off)
	}
	b.WriteString("9000 /dev/x close\n")
	return []byte(b.String())
}

func TestParseIOLogCountsDistinctPagesAndCacheBlocks(t *testing.T) {
	p := ScatterPlan{Zones: 2, ZoneStrideBytes: 10 << 20, HotPerZoneBytes: 1 << 20}
	// Two reads of one page, a second page of the same 256 KiB block, a
	// page in the next block, one in zone 2 and one outside the hot parts.
	log := iolog(0, 0, 8192, 256<<10, 10<<20+4096, 5<<20)
	pass, err := ParseIOLog(log, p, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	if pass.Reads != 6 || pass.TouchedBytes != 5*4096 || pass.TouchedBlockBytes != 4*(256<<10) || pass.OutsideHot != 1 {
		t.Errorf("pass %+v: want 6 reads, 5 pages, 4 blocks, 1 outside the hot zones", pass)
	}
	if _, err := ParseIOLog([]byte("1 /dev/x read x 4096\n"), p, 256<<10); err == nil {
		t.Error("a read line without an offset accepted")
	}
}

type fakeIOLogs struct {
	logs    map[string][]byte // by the path fio was given; "" for any
	removed []string
}

func (f *fakeIOLogs) ReadFile(path string) ([]byte, error) {
	if log, ok := f.logs[path]; ok {
		return log, nil
	}
	return f.logs[""], nil
}

func (f *fakeIOLogs) Remove(path string) error {
	f.removed = append(f.removed, path)
	return nil
}

func scatterConfig(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.WorkingSets = cfg.WorkingSets[:1] // 4 MiB: 4 zones of 1 MiB
	cfg.Targets[2].Path = "/dev/vol"
	cfg.Tests, cfg.PlotTest = []Test{ScatteredTest}, ScatteredTest.ID
	cfg.ScatterZones, cfg.ScatterBlockBytes, cfg.IOLogDir, cfg.IOLimit = 4, 256<<10, "/logs", 64<<10
	cfg.ReadOnly = true
	return cfg
}

// The scattered test reads over each whole target, hands fio the zones and
// an I/O log, and keeps what the log shows it touched.
func TestScatteredRunSpreadsOverEachTargetAndCountsTheLog(t *testing.T) {
	h := newHarness()
	h.deps.Inspector = fakeInspector{"/dev/ssd": {Kind: KindBlock, Size: 1 << 30}, "/dev/hdd": {Kind: KindBlock, Size: 1 << 30}, "/dev/vol": {Kind: KindBlock, Size: 4 << 40}}
	logs := &fakeIOLogs{logs: map[string][]byte{"": iolog(0, 4096, 256<<10)}}
	h.deps.IOLogs = logs
	b, err := New(scatterConfig(t), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(h.fio.calls) != 9 || len(logs.removed) != 9 {
		t.Fatalf("%d fio calls, %d logs removed: want 3 runs x 3 targets of each", len(h.fio.calls), len(logs.removed))
	}
	sizes := map[string]string{}
	for _, c := range h.fio.calls {
		sizes[argValue(c, "--filename")] = argValue(c, "--size")
		if !strings.HasPrefix(argValue(c, "--random_distribution"), "zoned_abs:25/1048576:0/") || !strings.HasPrefix(argValue(c, "--write_iolog"), "/logs/ssdcache-bench-iolog-") {
			t.Errorf("fio call %q: want 4 hot zones of 1 MiB and an I/O log under /logs", c)
		}
	}
	// 4 TiB / 4 zones, 1 GiB / 4 zones: each target's own zones.
	if sizes["/dev/vol"] != fmt.Sprint(int64(4<<40)) || sizes["/dev/hdd"] != fmt.Sprint(int64(1<<30)) {
		t.Errorf("fio spans %v: want each whole target", sizes)
	}
	res := r.Results[2]
	if res.Scatter == nil || res.Scatter.TouchedBytes != 3*4096 || res.Scatter.TouchedBlockBytes != 2*(256<<10) || res.Pass != 1 {
		t.Fatalf("ssdcache's run 1: scatter %+v, pass %d", res.Scatter, res.Pass)
	}
	if r.Results[8].Pass != 3 {
		t.Errorf("run 3 is pass %d: a scattered run is one pass however little it reads", r.Results[8].Pass)
	}
	if len(r.Scattered) != 3 || len(r.Scattered[2].Runs) != 3 || r.Scattered[2].Runs[0].HitRatio == nil {
		t.Fatalf("scattered figures %+v: want 3 targets of 3 runs, ssdcache's with hit ratios", r.Scattered)
	}
}

func TestScatteredRefusesWhatCannotHoldItsZones(t *testing.T) {
	h := newHarness()
	h.deps.IOLogs = &fakeIOLogs{}
	h.deps.Inspector = fakeInspector{"/dev/ssd": {Kind: KindBlock, Size: 1 << 30}, "/dev/hdd": {Kind: KindBlock, Size: 2 << 20}, "/dev/vol": {Kind: KindBlock, Size: 4 << 40}}
	b, err := New(scatterConfig(t), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "raw-hdd") || len(h.fio.calls) != 0 {
		t.Errorf("a 2 MiB target for 4 zones of 1 MiB: err %v after %d fio calls", err, len(h.fio.calls))
	}
	cfg := scatterConfig(t)
	cfg.ScatterZones = 3
	if _, err := New(cfg, h.deps); err == nil {
		t.Error("3 zones accepted: fio's zoned_abs takes whole percentages")
	}
	h.deps.IOLogs = nil
	if _, err := New(scatterConfig(t), h.deps); err == nil {
		t.Error("no I/O log reader accepted")
	}
}

func ptr[T any](v T) *T { return &v }

// Promoted bytes against hot and touched bytes, HDD bytes against the raw
// HDD's in the same run, from counters only.
func TestScatteredFigures(t *testing.T) {
	plan := ScatterPlan{Zones: 100, ZoneStrideBytes: 64 << 20, HotPerZoneBytes: 4 << 20}
	hddBelow := func(target string) TargetDisks {
		return TargetDisks{Target: target, Disks: []Disk{{Name: target + "-hdd", Role: DiskBelow, Rotational: true}, {Name: target + "-ssd", Role: DiskBelow}}}
	}
	result := func(target string, run int, hdd int64, hit *float64, touchedBlocks int64) Result {
		return Result{WorkingSet: "400Mi", Target: target, Run: run, Test: ScatteredTest.ID, Measurement: Measurement{MBps: 10}, HitRatio: hit,
			Disks:   []DiskFigures{{Disk: target + "-hdd", ReadBytes: hdd}, {Disk: target + "-ssd", ReadBytes: 1 << 20}},
			Scatter: &ScatterPass{ScatterPlan: plan, BlockBytes: 256 << 10, TouchedBytes: 32 << 20, TouchedBlockBytes: touchedBlocks}}
	}
	r := &Report{
		Config: Config{HDDReference: "raw-hdd", Tests: []Test{ScatteredTest}},
		Disks:  []TargetDisks{hddBelow("raw-hdd"), hddBelow("ssdcache")},
		Results: []Result{
			result("raw-hdd", 1, 32<<20, nil, 390<<20), result("ssdcache", 1, 32<<20, ptr(0.0), 390<<20),
			result("raw-hdd", 2, 32<<20, nil, 390<<20), result("ssdcache", 2, 8<<20, ptr(0.99), 390<<20),
		},
	}
	r.Scattered = scattered(r, nil)
	if !r.SetPromoted("400Mi", "ssdcache", 390<<20) || r.SetPromoted("400Mi", "lvmcache", 1) {
		t.Fatal("SetPromoted: want true for ssdcache only")
	}
	s := r.Scattered[1]
	if s.Target != "ssdcache" || s.HotBytes != 400<<20 || *s.PromotedOverHot != 390.0/400 || *s.PromotedOverTouched != 1 {
		t.Errorf("ssdcache's figures %+v", s)
	}
	if run := s.Runs[1]; *run.HDDReadBytes != 8<<20 || *run.HDDOverRawHDD != 0.25 || *run.HitRatio != 0.99 || *run.MBpsOverRawHDD != 1 {
		t.Errorf("run 2 %+v: want 8 MiB from the HDD, 0.25 of the raw HDD's", run)
	}
	// A merge analyses again: the promoted bytes stay.
	Analyze(r)
	if p := r.Scattered[1].PromotedBytes; p == nil || *p != 390<<20 {
		t.Errorf("promoted bytes after Analyze: %v", p)
	}
	var md strings.Builder
	writeScattered(&md, r)
	if !strings.Contains(md.String(), "| 400Mi | ssdcache | 100 x 4 MiB | 32 MiB (0.08 of hot) | 390 MiB of 256 KiB (0.97 of hot) | 0.97 | 1.00 | 0.00 0.99 | 0.080 0.020 | 1.00 0.25 |") {
		t.Errorf("report.md's row:\n%s", md.String())
	}
}
