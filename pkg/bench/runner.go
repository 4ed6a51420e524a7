package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
)

// Deps are the benchmark's seams to the machine.
type Deps struct {
	Fio       FioRunner
	Counters  CacheCounters // needed only when a target names a dm-cache device
	Tree      TreeFS        // needed only for the tree test
	Inspector TargetInspector
	// Disks, when set, records iostat's figures of each target's device and
	// of the disks beneath it around every test.
	Disks    DiskStats
	Clock    clock.Clock
	Progress io.Writer // one line per test, for a person watching
	// IOLogs reads back and removes fio's I/O logs; needed only for the
	// scattered test.
	IOLogs IOLogFiles
	// Version is ssdcache-bench's own version (pkg/version), recorded in
	// the report so figures can be matched to the release that measured them.
	Version string
}

// Bench runs one validated plan.
type Bench struct {
	cfg        Config
	deps       Deps
	fioVersion string // as fio reported it, for the report
	// noDisks remembers the targets whose disks could not be found, so the
	// progress says why once.
	noDisks map[string]bool
	// trees are the files of each working set's tree (tree test only).
	trees [][]TreeFile
	// laidOut are the target paths this run wrote before run 1.
	laidOut map[string]bool
	// sizes are the target paths' sizes, for the scattered test's zones.
	sizes map[string]int64
}

// New validates cfg and deps.
func New(cfg Config, deps Deps) (*Bench, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Fio == nil || deps.Inspector == nil || deps.Clock == nil || deps.Progress == nil || deps.Version == "" {
		return nil, errors.New("bench: Fio, Inspector, Clock, Progress and Version are required")
	}
	for _, t := range cfg.Targets {
		if t.DMDevice != "" && deps.Counters == nil {
			return nil, fmt.Errorf("target %s: dm-cache device %q given but no counter sampler", t.Name, t.DMDevice)
		}
	}
	b := &Bench{cfg: cfg, deps: deps, noDisks: map[string]bool{}, sizes: map[string]int64{}}
	if cfg.scattered() && deps.IOLogs == nil {
		return nil, fmt.Errorf("test %s: no I/O log reader given", ScatteredTest.ID)
	}
	if cfg.tree() {
		if deps.Tree == nil {
			return nil, fmt.Errorf("test %s: no tree filesystem given", TreeTest.ID)
		}
		for _, ws := range cfg.WorkingSets {
			b.trees = append(b.trees, PlanTree(ws.Bytes, cfg.RandSeed))
		}
	}
	return b, nil
}

// Prepare checks the targets and lays out what they lack, as Run does first,
// so a caller can empty its caches between the layout and run 1.
func (b *Bench) Prepare(ctx context.Context) error {
	return b.prepare(ctx, &Report{})
}

// Run prepares the targets, runs every working set's runs and analyses them.
// On error it still returns the report of what was measured, with Error set.
func (b *Bench) Run(ctx context.Context) (*Report, error) {
	r := &Report{SchemaVersion: SchemaVersion, Version: b.deps.Version, Config: b.cfg, StartedAt: b.deps.Clock.Now().UTC()}
	err := b.prepare(ctx, r)
	if err == nil {
		err = b.runWorkingSets(ctx, r)
	}
	r.FinishedAt = b.deps.Clock.Now().UTC()
	r.FioVersion = b.fioVersion
	Analyze(r)
	if err != nil {
		r.Error = err.Error()
	}
	return r, err
}

// prepare checks every target before any I/O, then lays out files that are
// too small, so run 1 reads written blocks and no layout I/O lands in a test.
// A target whose path names the working set ({ws}) is checked and laid out
// once per working set's path.
func (b *Bench) prepare(ctx context.Context, r *Report) error {
	b.laidOut = map[string]bool{}
	if b.cfg.tree() {
		return b.prepareTrees(ctx, r)
	}
	var fill []layout
	for _, l := range b.cfg.layouts() {
		info, err := b.deps.Inspector.Inspect(l.target.Path)
		if err != nil {
			return fmt.Errorf("target %s: inspecting %s: %w", l.target.Name, l.target.Path, err)
		}
		b.sizes[l.target.Path] = info.Size
		if err := b.checkScatter(l.target, info); err != nil {
			return err
		}
		need, err := prefillNeeded(l.target, info, l.span, b.cfg.ReadOnly)
		if err != nil {
			return err
		}
		if need {
			fill = append(fill, l)
		}
	}
	for _, l := range fill {
		t := l.target
		fmt.Fprintf(b.deps.Progress, "prefill %s: writing %d bytes to %s\n", t.Name, l.span, t.Path)
		job := fioJobSpec{Path: t.Path, Size: l.span, Test: prefillTest, RandSeed: b.cfg.RandSeed}
		if _, err := b.fio(ctx, job); err != nil {
			return fmt.Errorf("target %s: prefill of %s: %w", t.Name, t.Path, err)
		}
		b.laidOut[t.Path] = true
		if !slices.Contains(r.Prefilled, t.Name) {
			r.Prefilled = append(r.Prefilled, t.Name)
		}
	}
	return nil
}

// prepareTrees checks that every target is a directory and lays out each
// working set's tree where files are missing or of another size.
func (b *Bench) prepareTrees(ctx context.Context, r *Report) error {
	for _, l := range b.cfg.layouts() {
		t := l.target
		info, err := b.deps.Inspector.Inspect(t.Path)
		if err != nil {
			return fmt.Errorf("target %s: inspecting %s: %w", t.Name, t.Path, err)
		}
		if info.Kind != KindDir {
			return fmt.Errorf("target %s: %s is %s; the test %s needs a directory of a mounted filesystem", t.Name, t.Path, info.Kind, TreeTest.ID)
		}
		if info.MemoryFS != "" {
			return fmt.Errorf("target %s: %s is on %s, which keeps files in memory; the test %s needs a filesystem on the disks under test", t.Name, t.Path, info.MemoryFS, TreeTest.ID)
		}
	}
	for _, t := range b.cfg.Targets {
		for i, ws := range b.cfg.WorkingSets {
			if err := b.layOutTree(ctx, t.For(i+1), ws, b.trees[i], r); err != nil {
				return fmt.Errorf("target %s: %w", t.Name, err)
			}
		}
	}
	return nil
}

func (b *Bench) layOutTree(ctx context.Context, t Target, ws WorkingSet, plan []TreeFile, r *Report) error {
	root := treeRoot(t, ws, b.cfg.RandSeed)
	missing, err := b.deps.Tree.Missing(root, plan)
	if err != nil || len(missing) == 0 {
		return err
	}
	if b.cfg.ReadOnly {
		return fmt.Errorf("%d of the %d files of the tree %s are missing or of another size; read-only mode needs the tree laid out by a run without -read-only", len(missing), len(plan), root)
	}
	fmt.Fprintf(b.deps.Progress, "layout %s: writing %d files to %s\n", t.Name, len(missing), root)
	if err := b.deps.Tree.Write(ctx, root, plan, missing); err != nil {
		return fmt.Errorf("laying out the tree %s: %w", root, err)
	}
	b.laidOut[t.Path] = true
	if !slices.Contains(r.Prefilled, t.Name) {
		r.Prefilled = append(r.Prefilled, t.Name)
	}
	return nil
}

var prefillTest = Test{ID: "prefill", Label: "prefill", BlockSize: 1 << 20, QueueDepth: 8, Direction: Write}

// runWorkingSets runs the working sets one after another. Within a working
// set, run k measures every target before run k+1 starts, so the targets are
// compared under the same conditions and one interval serves them all.
func (b *Bench) runWorkingSets(ctx context.Context, r *Report) error {
	r.Config.WorkingSets = slices.Clone(b.cfg.WorkingSets) // CacheAtStart is the report's, not the plan's
	for wi, ws := range b.cfg.WorkingSets {
		r.Config.WorkingSets[wi].CacheAtStart = b.cacheAtStart(wi)
		for run := 1; run <= b.cfg.Runs; run++ {
			if run > 1 {
				if err := b.sleep(ctx, b.cfg.Interval); err != nil {
					return err
				}
			}
			klog.InfoS("Starting run", "workingSet", ws.Label, "run", run, "runs", b.cfg.Runs)
			for _, t := range b.cfg.Targets {
				pos := position{wsIndex: wi, ws: ws, run: run, target: t.For(wi + 1)}
				if err := b.runTests(ctx, pos, r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cacheAtStart says what each measured target's cache could hold as
// working set wi begins: whether the path is the working set's own, laid
// out by this run, and which working sets read it before.
func (b *Bench) cacheAtStart(wi int) []CacheStart {
	var out []CacheStart
	for _, t := range b.cfg.Targets {
		if b.isReference(t) {
			continue // a raw disk has no cache
		}
		path := t.For(wi + 1).Path
		cs := CacheStart{Target: t.Name, Path: path, OwnPath: true, LaidOut: b.laidOut[path]}
		for wj, other := range b.cfg.WorkingSets {
			if wj == wi || t.For(wj+1).Path != path {
				continue
			}
			cs.OwnPath = false
			if wj < wi {
				cs.After = append(cs.After, other.Label)
			}
		}
		out = append(out, cs)
	}
	return out
}

type position struct {
	wsIndex int
	ws      WorkingSet
	run     int
	target  Target
}

func (b *Bench) runTests(ctx context.Context, pos position, r *Report) error {
	for _, test := range b.cfg.Tests {
		res, err := b.runTest(ctx, pos, test, r)
		if err != nil {
			return fmt.Errorf("working set %s, run %d, target %s, test %s: %w", pos.ws.Label, pos.run, pos.target.Name, test.ID, err)
		}
		r.Results = append(r.Results, res)
		fmt.Fprintln(b.deps.Progress, b.progressLine(pos, test, res))
		if !b.isReference(pos.target) {
			if err := b.sleep(ctx, b.cfg.TestInterval); err != nil {
				return err
			}
		}
	}
	return nil
}

// isReference tells the raw SSD and HDD, which do no background work, from
// the targets measured against them.
func (b *Bench) isReference(t Target) bool {
	return t.Name == b.cfg.SSDReference || t.Name == b.cfg.HDDReference
}

// runTest runs one test (measure), sampling dm-cache and disk counters
// right before and after it.
func (b *Bench) runTest(ctx context.Context, pos position, test Test, r *Report) (Result, error) {
	res := Result{WorkingSet: pos.ws.Label, Target: pos.target.Name, Run: pos.run, Test: test.ID, StartedAt: b.deps.Clock.Now().UTC()}
	disks := b.disksUnder(pos.target, r)
	diskStats := b.readDisks(disks)
	dm := pos.target.DMDevice
	before, haveBefore, err := b.sampleCounters(ctx, dm)
	if err != nil {
		return res, err
	}
	m, scatter, err := b.measure(ctx, pos, test)
	if err != nil {
		return res, err
	}
	res.Measurement = m
	res.Scatter = scatter
	res.Disks = b.diskFigures(disks, diskStats, ioTime(m, b.deps.Clock.Since(res.StartedAt)))
	after, haveAfter, err := b.sampleCounters(ctx, dm)
	if err != nil {
		return res, err
	}
	if haveBefore && haveAfter {
		d := Delta(before, after)
		res.Counters = &d
		res.HitRatio = hitRatio(d, test.Direction)
	}
	if res.HitRatio == nil && test.Direction == Read {
		res.HitRatio = notFromHDD(disks, res.Disks)
	}
	return res, nil
}

// measure runs the test itself: the tree test reads the whole tree (the
// runtime and I/O limits do not apply: its figure is the time to read all
// of it), the scattered test is a fio job over the whole target whose I/O
// log says what it read, every other test is one fio job.
func (b *Bench) measure(ctx context.Context, pos position, test Test) (Measurement, *ScatterPass, error) {
	if test.Tree {
		m, err := b.deps.Tree.Read(ctx, treeRoot(pos.target, pos.ws, b.cfg.RandSeed), b.trees[pos.wsIndex], test.BlockSize)
		return m, nil, err
	}
	if test.Scattered {
		return b.measureScattered(ctx, pos, test)
	}
	m, err := b.fio(ctx, fioJobSpec{
		Path: pos.target.Path, Offset: pos.ws.OffsetBytes, Size: pos.ws.Bytes, Test: test,
		ReadOnly: b.cfg.ReadOnly, Runtime: b.cfg.RuntimeLimit, IOLimit: b.cfg.IOLimit, RandSeed: b.cfg.RandSeed,
	})
	return m, nil, err
}

// sampleCounters reads the target's dm-cache counters; ok is false for a
// target without a dm-cache device and while its cache is swapped out.
func (b *Bench) sampleCounters(ctx context.Context, dm string) (c Counters, ok bool, err error) {
	if dm == "" {
		return Counters{}, false, nil
	}
	c, err = b.deps.Counters.Sample(ctx, dm)
	switch {
	case errors.Is(err, ErrNoCacheTable):
		return Counters{}, false, nil
	case err != nil:
		return Counters{}, false, fmt.Errorf("sampling dm-cache counters of %s: %w", dm, err)
	}
	return c, true, nil
}

// notFromHDD is the share of the bytes read through the target that its
// rotational disks did not serve: a read hit ratio from the block layer, for
// a cache without dm-cache counters (bcache) and a test that began or ended
// while a cache was swapped out. It counts a cache's own copies from the
// HDD as misses (ssdcache's promoter's, which dm-cache's counters do not
// see), so it is no substitute where counters exist. nil unless the disks
// below include both a rotational and a non-rotational one (many virtual
// disks say rotational for an SSD).
func notFromHDD(disks []Disk, figures []DiskFigures) *float64 {
	isRotational := map[string]bool{}
	for _, d := range disks {
		isRotational[d.Name] = d.Rotational
	}
	var target, hdd float64
	var rotational, solid bool
	for _, f := range figures {
		switch {
		case f.Role == DiskTarget:
			target += f.ReadMBps
		case isRotational[f.Disk]:
			hdd += f.ReadMBps
			rotational = true
		default:
			solid = true
		}
	}
	if !rotational || !solid || target <= 0 {
		return nil
	}
	h := max(0, 1-hdd/target)
	return &h
}

// disksUnder finds the disks under a target before each test: a cache
// attached or detached meanwhile changes them. Disk figures are an addition
// to the measurement: a target without them (a file on tmpfs, no sysfs) is
// still measured, and the progress says why, once. Disks seen for the first
// time are described in the report.
func (b *Bench) disksUnder(t Target, r *Report) []Disk {
	if b.deps.Disks == nil {
		return nil
	}
	disks, err := b.deps.Disks.Under(t.Path)
	if err != nil {
		if !b.noDisks[t.Name] {
			fmt.Fprintf(b.deps.Progress, "target %s: no disk figures: %v\n", t.Name, err)
			b.noDisks[t.Name] = true
		}
		return nil
	}
	r.describeDisks(t.Name, disks)
	return disks
}

// ioTime is how long the test did I/O: fio's runtime, which leaves out
// fio's start and the file's open, so a disk's figures compare with fio's
// own; the wall time around the test when fio reports none.
func ioTime(m Measurement, wall time.Duration) time.Duration {
	if m.RuntimeMs > 0 {
		return time.Duration(m.RuntimeMs) * time.Millisecond
	}
	return wall
}

// diskReading is one disk's counters at one moment; ok is false when
// they could not be read.
type diskReading struct {
	stats blockdev.IOStats
	ok    bool
}

func (b *Bench) readDisks(disks []Disk) []diskReading {
	out := make([]diskReading, len(disks))
	for i, d := range disks {
		st, err := b.deps.Disks.Read(d)
		if err != nil {
			klog.InfoS("Reading a disk's counters failed; the test has no figures for it", "disk", d.Name, "err", err)
			continue
		}
		out[i] = diskReading{stats: st, ok: true}
	}
	return out
}

// diskFigures are the figures of the disks read before the test and again now.
func (b *Bench) diskFigures(disks []Disk, before []diskReading, elapsed time.Duration) []DiskFigures {
	after := b.readDisks(disks)
	var out []DiskFigures
	for i, d := range disks {
		if before[i].ok && after[i].ok {
			out = append(out, diskFigures(d, after[i].stats.Since(before[i].stats), elapsed))
		}
	}
	return out
}

func hitRatio(d Counters, dir Direction) *float64 {
	ratio, ok := d.ReadHitRatio()
	if dir == Write {
		ratio, ok = d.WriteHitRatio()
	}
	if !ok {
		return nil
	}
	return &ratio
}

// fio runs one job and parses its measurement; the first fio version seen is kept.
func (b *Bench) fio(ctx context.Context, job fioJobSpec) (Measurement, error) {
	out, err := b.deps.Fio.Run(ctx, job.args())
	if err != nil {
		return Measurement{}, err
	}
	m, version, err := ParseFioJSON(out, job.Test.Direction)
	if b.fioVersion == "" {
		b.fioVersion = version
	}
	return m, err
}

func (b *Bench) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.deps.Clock.After(d):
		return nil
	}
}

func (b *Bench) progressLine(pos position, test Test, res Result) string {
	line := fmt.Sprintf("[%s %d/%d] run %d/%d %-10s %-18s %9.1f MB/s %9.0f IOPS  p50 %8.0f us  p99 %8.0f us",
		pos.ws.Label, pos.wsIndex+1, len(b.cfg.WorkingSets), pos.run, b.cfg.Runs,
		pos.target.Name, test.Label, res.MBps, res.IOPS, res.LatP50us, res.LatP99us)
	if res.HitRatio != nil {
		line += fmt.Sprintf("  hits %.2f", *res.HitRatio)
	}
	if res.Counters != nil {
		line += fmt.Sprintf("  promotions %d demotions %d", res.Counters.Promotions, res.Counters.Demotions)
	}
	return line
}
