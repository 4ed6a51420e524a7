package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func testConfig(t *testing.T) Config {
	t.Helper()
	sets, err := ParseWorkingSets([]string{"4Mi", "50%"}, 16<<20, true)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Targets: []Target{
			{Name: "raw-ssd", Path: "/dev/ssd"},
			{Name: "raw-hdd", Path: "/dev/hdd"},
			{Name: "ssdcache", Path: "/mnt/vol/bench.dat", DMDevice: "ssdcache-pvc-1"},
		},
		Runs: 3, WorkingSets: sets, Tests: Matrix(), RandSeed: 7,
		SSDReference: "raw-ssd", HDDReference: "raw-hdd", ConvergeFraction: 0.9, PlotTest: "seq1m-q8t1-read",
	}
}

// testVersion stands for the ssdcache-bench version the binary passes in.
const testVersion = "1.2.3-rc.1"

type harness struct {
	fio      *recordedFio
	counters *steppingCounters
	progress *bytes.Buffer
	deps     Deps
}

func newHarness() *harness {
	h := &harness{
		fio:      &recordedFio{},
		counters: newSteppingCounters(Counters{ReadHits: 0xFFFFFFF0, ReadMisses: 5}, Counters{ReadHits: 0x20, ReadMisses: 0x10, Promotions: 3}),
		progress: &bytes.Buffer{},
	}
	h.deps = Deps{
		Fio: h.fio, Counters: h.counters, Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Progress: h.progress, Version: testVersion,
		Inspector: fakeInspector{
			"/dev/ssd": {Kind: KindBlock, Size: 1 << 30},
			"/dev/hdd": {Kind: KindBlock, Size: 1 << 30},
		},
	}
	return h
}

func TestRunMeasuresEveryCell(t *testing.T) {
	h := newHarness()
	cfg := testConfig(t)
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cells := len(cfg.WorkingSets) * cfg.Runs * len(cfg.Targets) * len(cfg.Tests)
	if len(r.Results) != cells {
		t.Fatalf("%d results, want %d", len(r.Results), cells)
	}
	if got := strings.Count(h.progress.String(), "MB/s"); got != cells {
		t.Errorf("%d progress lines, want one per test (%d)", got, cells)
	}
	if len(r.Prefilled) != 1 || r.Prefilled[0] != "ssdcache" || h.fio.callsNamed("prefill") != 1 {
		t.Errorf("prefilled %v with %d fio calls; want only the missing file, once", r.Prefilled, h.fio.callsNamed("prefill"))
	}
	if r.FioVersion != "fio-3.33" {
		t.Errorf("FioVersion = %q", r.FioVersion)
	}
	if h.counters.samples != 2*cfg.Runs*len(cfg.WorkingSets)*len(cfg.Tests) {
		t.Errorf("%d counter samples, want two per test of the dm-cache target", h.counters.samples)
	}
}

func TestRunCounterDeltasAcrossWrap(t *testing.T) {
	h := newHarness()
	b, err := New(testConfig(t), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Results {
		if res.Target != "ssdcache" {
			if res.Counters != nil || res.HitRatio != nil {
				t.Fatalf("%s has counters but no dm-cache device", res.Target)
			}
			continue
		}
		want := Counters{ReadHits: 0x20, ReadMisses: 0x10, Promotions: 3}
		if res.Counters == nil || *res.Counters != want {
			t.Fatalf("run %d %s: counters %+v, want %+v", res.Run, res.Test, res.Counters, want)
		}
		if res.Test == "seq1m-q8t1-read" && (res.HitRatio == nil || *res.HitRatio != 2.0/3) {
			t.Fatalf("read hit ratio %v, want 2/3", res.HitRatio)
		}
		if strings.HasSuffix(res.Test, "-write") && res.HitRatio != nil {
			t.Fatalf("write test has hit ratio %v without write hits or misses", *res.HitRatio)
		}
	}
}

func TestRunUsesTheSameSeedAndRegionEveryRun(t *testing.T) {
	h := newHarness()
	cfg := testConfig(t)
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	regions := map[string]map[string]bool{}
	for _, c := range h.fio.calls {
		if argValue(c, "--randseed") != "7" || argValue(c, "--randrepeat") != "1" || argValue(c, "--direct") != "1" {
			t.Fatalf("job without fixed seed or O_DIRECT: %v", c)
		}
		key := argValue(c, "--filename") + " " + argValue(c, "--name")
		if regions[key] == nil {
			regions[key] = map[string]bool{}
		}
		regions[key][argValue(c, "--offset")+"+"+argValue(c, "--size")] = true
	}
	for key, r := range regions {
		if !strings.Contains(key, "prefill") && len(r) != len(cfg.WorkingSets) {
			t.Errorf("%s touched regions %v, want one per working set", key, r)
		}
	}
}

func TestRunReadOnlyRefusesShortFile(t *testing.T) {
	h := newHarness()
	cfg := testConfig(t)
	cfg.ReadOnly = true
	cfg.Tests, _ = SelectTests([]string{"read"})
	h.deps.Inspector = fakeInspector{
		"/dev/ssd": {Kind: KindBlock, Size: 1 << 30}, "/dev/hdd": {Kind: KindBlock, Size: 1 << 30},
		"/mnt/vol/bench.dat": {Kind: KindFile, Size: 1 << 20},
	}
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "read-only mode needs an existing file") {
		t.Fatalf("err = %v, want a refusal naming read-only mode", err)
	}
	if len(h.fio.calls) != 0 {
		t.Fatalf("fio ran %d times before the targets were checked", len(h.fio.calls))
	}
}

func TestRunReadOnlyPassesReadonlyToFio(t *testing.T) {
	h := newHarness()
	cfg := testConfig(t)
	cfg.ReadOnly = true
	cfg.Tests, _ = SelectTests([]string{"read"})
	cfg.Targets = cfg.Targets[:2]
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range h.fio.calls {
		if !strings.Contains(strings.Join(c, " "), "--readonly") || strings.Contains(argValue(c, "--rw"), "write") {
			t.Fatalf("read-only job %v", c)
		}
	}
}

func TestRunStopsOnFioFailureWithPartialReport(t *testing.T) {
	h := newHarness()
	h.fio.failOn = 5 // the prefill, then four tests of raw-ssd
	b, err := New(testConfig(t), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "target raw-ssd, test rnd4k-q1t1-read") {
		t.Fatalf("err = %v, want the failing target and test named", err)
	}
	if len(r.Results) != 3 || r.Error == "" {
		t.Fatalf("partial report has %d results and error %q; want 3 and the error", len(r.Results), r.Error)
	}
}

func TestRunWaitsTheIntervalBetweenRuns(t *testing.T) {
	h := newHarness()
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	h.deps.Clock = clk
	cfg := testConfig(t)
	cfg.Runs, cfg.Interval, cfg.WorkingSets = 2, time.Minute, cfg.WorkingSets[:1]
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	perRun := len(cfg.Targets) * len(cfg.Tests)
	if got := len(h.fio.calls) - 1; got != perRun {
		t.Fatalf("%d tests before the pause, want run 1's %d", got, perRun)
	}
	clk.Step(time.Minute)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := len(h.fio.calls) - 1; got != 2*perRun {
		t.Fatalf("%d tests, want %d", got, 2*perRun)
	}
}

// The references do no background work: only the measured targets pause
// after each of their tests.
func TestRunPausesAfterEachTestOfAMeasuredTarget(t *testing.T) {
	h := newHarness()
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	h.deps.Clock = clk
	cfg := testConfig(t)
	cfg.Runs, cfg.TestInterval, cfg.WorkingSets = 1, 5*time.Second, cfg.WorkingSets[:1]
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	pauses := 0
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		default:
			if !clk.HasWaiters() {
				time.Sleep(time.Millisecond)
				continue
			}
			pauses++
			// raw-ssd and raw-hdd ran every test without a pause; ssdcache pauses after each.
			if got, want := len(h.fio.calls)-1, 2*len(cfg.Tests)+pauses; got != want {
				t.Fatalf("pause %d came after %d tests, want %d", pauses, got, want)
			}
			clk.Step(cfg.TestInterval)
		}
	}
	if pauses != len(cfg.Tests) {
		t.Fatalf("%d pauses, want one after each of ssdcache's %d tests", pauses, len(cfg.Tests))
	}
}

func TestRunStopsWhenCancelledDuringInterval(t *testing.T) {
	h := newHarness()
	cfg := testConfig(t)
	cfg.Interval = time.Hour
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !h.deps.Clock.(*clocktesting.FakeClock).HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	r, err := b.Run(ctx)
	if err == nil || r.Error == "" || len(r.Results) == 0 {
		t.Fatalf("err %v, report error %q, %d results; want a cancelled partial report", err, r.Error, len(r.Results))
	}
}

// The report says which ssdcache-bench measured, in report.json and in the
// header of report.md, so figures can be matched to a release.
func TestReportRecordsTheBenchVersion(t *testing.T) {
	h := newHarness()
	b, err := New(testConfig(t), h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteFiles(dir, r); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	if top["version"] != testVersion {
		t.Errorf("report.json version = %v, want %q", top["version"], testVersion)
	}
	md, err := os.ReadFile(filepath.Join(dir, ReportMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	if want := "- ssdcache-bench " + testVersion + ", fio-3.33, "; !strings.Contains(string(md), want) {
		t.Errorf("report.md header lacks %q:\n%s", want, md)
	}
}

func TestNewRequiresTheVersion(t *testing.T) {
	h := newHarness()
	h.deps.Version = ""
	if _, err := New(testConfig(t), h.deps); err == nil || !strings.Contains(err.Error(), "Version") {
		t.Fatalf("err = %v, want Version named as required", err)
	}
}

func TestNewRejectsDMTargetWithoutSampler(t *testing.T) {
	h := newHarness()
	h.deps.Counters = nil
	if _, err := New(testConfig(t), h.deps); err == nil || !strings.Contains(err.Error(), "ssdcache-pvc-1") {
		t.Fatalf("err = %v, want the dm device named", err)
	}
}

// swappedCounters answers ErrNoCacheTable for the samples listed, as
// ssdcache's promoter's swap makes the cache table linear for seconds.
type swappedCounters struct {
	CacheCounters
	swapped map[int]bool
	n       int
}

func (s *swappedCounters) Sample(ctx context.Context, device string) (Counters, error) {
	s.n++
	if s.swapped[s.n] {
		return Counters{}, fmt.Errorf("dm device %s: %w", device, ErrNoCacheTable)
	}
	return s.CacheCounters.Sample(ctx, device)
}

func TestATestDuringACacheSwapHasNoCounters(t *testing.T) {
	h := newHarness()
	h.deps.Counters = &swappedCounters{CacheCounters: h.counters, swapped: map[int]bool{1: true, 4: true}}
	cfg := testConfig(t)
	cfg.Runs, cfg.WorkingSets = 1, cfg.WorkingSets[:1]
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatalf("a swapped-out cache stopped the bench: %v", err)
	}
	var with, without int
	for _, res := range r.Results {
		if res.Target != "ssdcache" {
			continue
		}
		if res.Counters == nil {
			without++
		} else {
			with++
		}
	}
	// Samples 1 (before test 1) and 4 (after test 2) found no cache table.
	if without != 2 || with != len(cfg.Tests)-2 {
		t.Fatalf("%d tests with counters, %d without; want %d and 2", with, without, len(cfg.Tests)-2)
	}
}

func TestReadHitRatioFromTheBlockLayer(t *testing.T) {
	disks := []Disk{{Name: "dm-3", Role: DiskTarget}, {Name: "sda", Role: DiskBelow, Rotational: true}, {Name: "nvme0n1", Role: DiskBelow}}
	figures := []DiskFigures{{Disk: "dm-3", Role: DiskTarget, ReadMBps: 100}, {Disk: "sda", Role: DiskBelow, ReadMBps: 20}, {Disk: "nvme0n1", Role: DiskBelow, ReadMBps: 85}}
	if h := notFromHDD(disks, figures); h == nil || *h != 0.8 {
		t.Fatalf("hit ratio %v, want 0.8 (20 of 100 MB/s from the HDD)", h)
	}
	figures[1].ReadMBps = 130 // the cache's own copies from the HDD count too
	if h := notFromHDD(disks, figures); h == nil || *h != 0 {
		t.Fatalf("hit ratio %v, want 0", h)
	}
	disks[2].Rotational = true // a virtual SSD that says rotational: HDD and SSD cannot be told apart
	if h := notFromHDD(disks, figures); h != nil {
		t.Fatalf("hit ratio %v without a non-rotational disk, want none", *h)
	}
}
