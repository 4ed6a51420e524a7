package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Deps are the benchmark's seams to the machine.
type Deps struct {
	Fio       FioRunner
	Counters  CacheCounters // needed only when a target names a dm-cache device
	Inspector TargetInspector
	Clock     clock.Clock
	Progress  io.Writer // one line per test, for a person watching
	// Version is ssdcache-bench's own version (pkg/version), recorded in
	// the report so figures can be matched to the release that measured them.
	Version string
}

// Bench runs one validated plan.
type Bench struct {
	cfg        Config
	deps       Deps
	fioVersion string // as fio reported it, for the report
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
	return &Bench{cfg: cfg, deps: deps}, nil
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
func (b *Bench) prepare(ctx context.Context, r *Report) error {
	span := b.cfg.span()
	var fill []Target
	for _, t := range b.cfg.Targets {
		info, err := b.deps.Inspector.Inspect(t.Path)
		if err != nil {
			return fmt.Errorf("target %s: inspecting %s: %w", t.Name, t.Path, err)
		}
		need, err := prefillNeeded(t, info, span, b.cfg.ReadOnly)
		if err != nil {
			return err
		}
		if need {
			fill = append(fill, t)
		}
	}
	for _, t := range fill {
		fmt.Fprintf(b.deps.Progress, "prefill %s: writing %d bytes to %s\n", t.Name, span, t.Path)
		job := fioJobSpec{Path: t.Path, Size: span, Test: prefillTest, RandSeed: b.cfg.RandSeed}
		if _, err := b.fio(ctx, job); err != nil {
			return fmt.Errorf("target %s: prefill: %w", t.Name, err)
		}
		r.Prefilled = append(r.Prefilled, t.Name)
	}
	return nil
}

var prefillTest = Test{ID: "prefill", Label: "prefill", BlockSize: 1 << 20, QueueDepth: 8, Direction: Write}

// runWorkingSets runs the working sets one after another. Within a working
// set, run k measures every target before run k+1 starts, so the targets are
// compared under the same conditions and one interval serves them all.
func (b *Bench) runWorkingSets(ctx context.Context, r *Report) error {
	for wi, ws := range b.cfg.WorkingSets {
		for run := 1; run <= b.cfg.Runs; run++ {
			if run > 1 {
				if err := b.sleep(ctx, b.cfg.Interval); err != nil {
					return err
				}
			}
			klog.InfoS("Starting run", "workingSet", ws.Label, "run", run, "runs", b.cfg.Runs)
			for _, t := range b.cfg.Targets {
				pos := position{wsIndex: wi, ws: ws, run: run, target: t}
				if err := b.runTests(ctx, pos, r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type position struct {
	wsIndex int
	ws      WorkingSet
	run     int
	target  Target
}

func (b *Bench) runTests(ctx context.Context, pos position, r *Report) error {
	for _, test := range b.cfg.Tests {
		res, err := b.runTest(ctx, pos, test)
		if err != nil {
			return fmt.Errorf("working set %s, run %d, target %s, test %s: %w", pos.ws.Label, pos.run, pos.target.Name, test.ID, err)
		}
		r.Results = append(r.Results, res)
		fmt.Fprintln(b.deps.Progress, b.progressLine(pos, test, res))
	}
	return nil
}

// runTest runs one fio job, sampling dm-cache counters right before and after it.
func (b *Bench) runTest(ctx context.Context, pos position, test Test) (Result, error) {
	res := Result{WorkingSet: pos.ws.Label, Target: pos.target.Name, Run: pos.run, Test: test.ID, StartedAt: b.deps.Clock.Now().UTC()}
	var before Counters
	dm := pos.target.DMDevice
	if dm != "" {
		var err error
		if before, err = b.deps.Counters.Sample(ctx, dm); err != nil {
			return res, fmt.Errorf("sampling dm-cache counters of %s: %w", dm, err)
		}
	}
	job := fioJobSpec{
		Path: pos.target.Path, Offset: pos.ws.OffsetBytes, Size: pos.ws.Bytes, Test: test,
		ReadOnly: b.cfg.ReadOnly, Runtime: b.cfg.RuntimeLimit, IOLimit: b.cfg.IOLimit, RandSeed: b.cfg.RandSeed,
	}
	m, err := b.fio(ctx, job)
	if err != nil {
		return res, err
	}
	res.Measurement = m
	if dm != "" {
		after, err := b.deps.Counters.Sample(ctx, dm)
		if err != nil {
			return res, fmt.Errorf("sampling dm-cache counters of %s: %w", dm, err)
		}
		d := Delta(before, after)
		res.Counters = &d
		res.HitRatio = hitRatio(d, test.Direction)
	}
	return res, nil
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
