// Command ssdcache-bench runs the repeated-run convergence benchmark:
// CrystalDiskMark's matrix through fio on several targets side by side, and
// writes report.json, report.md and convergence.svg, into a directory and, in
// a pod, into a ConfigMap.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/exec"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/bench/reportcm"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/logging"
	"github.com/ssdcache/ssdcache/pkg/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], system{exec: exec.New(), pod: osPod(), stdout: os.Stdout, stderr: os.Stderr})
	stop()
	klog.Flush()
	os.Exit(code)
}

// system is everything run reaches outside the process; tests substitute it.
type system struct {
	exec   exec.Interface
	pod    pod
	stdout io.Writer // only --version writes here
	stderr io.Writer
}

// run returns the exit code: 0 done, 1 benchmark or report output failed (a
// partial report is still written), 2 bad flags or a report ConfigMap that
// cannot be written (checked before the benchmark starts).
func run(ctx context.Context, args []string, sys system) int {
	opts, err := parseFlags(args, sys.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(sys.stderr, "ssdcache-bench:", err)
		return 2
	}
	if opts.printVersion {
		fmt.Fprintln(sys.stdout, version.Get().String("ssdcache-bench"))
		return 0
	}
	if err := opts.logging.Apply(); err != nil {
		fmt.Fprintln(sys.stderr, "ssdcache-bench:", err)
		return 2
	}
	runner := command.NewRunner(sys.exec)
	deps := bench.Deps{
		Fio:       bench.CommandFioRunner{Runner: runner, Binary: opts.fioBinary},
		Counters:  dmCacheCounters{dm: dm.NewDmsetup(runner)},
		Inspector: bench.OSInspector{},
		Tree:      bench.OSTreeFS{},
		Disks:     bench.SysfsDisks{Root: "/sys"},
		IOLogs:    bench.OSIOLogFiles{},
		Clock:     clock.RealClock{},
		Progress:  sys.stderr,
		Version:   version.Version,
	}
	b, err := bench.New(opts.config, deps)
	if err != nil {
		fmt.Fprintln(sys.stderr, "ssdcache-bench:", err)
		return 2
	}
	if opts.prepareOnly {
		if err := b.Prepare(ctx); err != nil {
			klog.ErrorS(err, "Preparing the targets failed")
			return 1
		}
		return 0
	}
	publisher, err := reportPublisher(ctx, opts.report, sys.pod)
	if err != nil {
		fmt.Fprintln(sys.stderr, "ssdcache-bench:", err)
		return 2
	}
	report, runErr := runWithin(ctx, b, opts.timeLimit)
	return writeReport(ctx, opts.outputDir, publisher, report, runErr)
}

// runWithin runs the benchmark and stops it after limit (0: no limit). A run
// stopped by the limit says so in its error and in the report, so that a
// reader does not take the missing runs for a crash.
func runWithin(ctx context.Context, b *bench.Bench, limit time.Duration) (*bench.Report, error) {
	if limit <= 0 {
		return b.Run(ctx)
	}
	limitErr := fmt.Errorf("time limit %s (-time-limit) reached; the report holds the runs measured before it", limit)
	runCtx, cancel := context.WithTimeoutCause(ctx, limit, limitErr)
	defer cancel()
	report, err := b.Run(runCtx)
	if err != nil && errors.Is(context.Cause(runCtx), limitErr) {
		err = limitErr
		report.Error = limitErr.Error()
	}
	return report, err
}

// writeReport writes the report to the output directory and, when asked, to
// the ConfigMap, each even if the other fails.
func writeReport(ctx context.Context, dir string, publisher *reportcm.Publisher, report *bench.Report, runErr error) int {
	code := 0
	if err := bench.WriteFiles(dir, report); err != nil {
		klog.ErrorS(err, "Writing the report failed", "dir", dir)
		code = 1
	} else {
		klog.InfoS("Report written", "dir", dir, "results", len(report.Results))
	}
	if publisher != nil {
		// A SIGTERM cancels ctx, and the partial report is worth publishing
		// within the pod's grace period.
		pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
		defer cancel()
		if err := publisher.Publish(pubCtx, report); err != nil {
			klog.ErrorS(err, "Publishing the report ConfigMap failed; the files are complete", "dir", dir)
			code = 1
		}
	}
	if runErr != nil {
		klog.ErrorS(runErr, "Benchmark stopped early; the report holds what was measured")
		code = 1
	}
	return code
}

type options struct {
	config    bench.Config
	outputDir string
	fioBinary string
	report    reportFlags
	timeLimit time.Duration
	// prepareOnly lays out files and trees and stops, so their writes can
	// be evicted from a cache before run 1.
	prepareOnly bool
	// printVersion skips everything else: --version needs no targets.
	printVersion bool
	logging      *logging.Options
}

// listFlag collects a repeatable flag; commas also separate values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

type rawFlags struct {
	targets, dmDevices, workingSets, tests listFlag
	cacheSize, volumeSize                  string
	disjoint                               bool
	ioLimit                                string
	scatterBlock                           string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("ssdcache-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var raw rawFlags
	var opts options
	opts.logging = logging.AddFlags(fs)
	c := &opts.config
	fs.Var(&raw.targets, "target", "name=path of a block device or a file in a mounted volume, or a directory of a mounted volume for -tests tree-read; repeat for side-by-side targets (e.g. raw-ssd=/dev/vdb). "+bench.WorkingSetPlaceholder+" in the path stands for the working set's number (1, 2, ...): volume=/data/ws-"+bench.WorkingSetPlaceholder+"/bench.dat reads a volume, and so a cache, of its own per working set")
	fs.Var(&raw.dmDevices, "dm-cache", "name=dm-device: the target's dm-cache device (dm name or /dev/mapper path) whose counters are sampled around each test; repeatable")
	fs.IntVar(&c.Runs, "runs", 6, "runs of the test matrix per working set")
	fs.DurationVar(&c.Interval, "interval", 0, "pause between runs (e.g. 2m)")
	fs.DurationVar(&c.TestInterval, "test-interval", 0, "pause after each test of a target other than -ssd-ref and -hdd-ref, as CrystalDiskMark pauses between tests: a cache's background work (promotions, migrations, writeback) runs in its own target's time, as between an application's bursts of reads, not during the next target's test")
	fs.Var(&raw.workingSets, "working-sets", "working-set sizes: bytes, quantities (256Mi) or percentages of -cache-size (25%); comma-separated or repeated")
	fs.StringVar(&raw.cacheSize, "cache-size", "", "cache size that percentage working sets refer to: a quantity (e.g. 1Gi), or a percentage of -volume-size as a StorageClass's "+ssdv1.ParamCacheSize+" gives it (e.g. 10%), resolved as the driver resolves it")
	fs.StringVar(&raw.volumeSize, "volume-size", "", "size of the volume a percentage -cache-size is of (the PVC's request, e.g. 100Gi)")
	fs.BoolVar(&raw.disjoint, "disjoint-working-sets", true, "place each working set after the previous one, so a set never starts on blocks a smaller set warmed; ignored when every target's path names the working set ("+bench.WorkingSetPlaceholder+"), as each then reads its own volume")
	fs.Var(&raw.tests, "tests", "tests to run: all, read, write (CrystalDiskMark's matrix) or test IDs ("+strings.Join(bench.TestIDs(), ", ")+
		"); default all (read with -read-only). tree-read, the application-load profile, runs alone: it lays out a tree of a few thousand files of mixed sizes per working set in each directory target and times reading all of it")
	fs.BoolVar(&c.ReadOnly, "read-only", false, "only read (fio --readonly); files are never laid out")
	fs.DurationVar(&c.RuntimeLimit, "runtime", 0, "time limit per test; 0: one full pass over the working set (tree-read always reads the whole tree)")
	fs.BoolVar(&opts.prepareOnly, "prepare-only", false, "check the targets, lay out missing files and trees, and exit without running tests")
	fs.StringVar(&raw.ioLimit, "io-limit", "0", "bytes per test (fio io_size); 0: the working set")
	fs.IntVar(&c.ScatterZones, "scatter-zones", 100, "hot zones of "+bench.ScatteredTest.ID+", spread evenly over each whole target, each holding an equal part of the working set (a divisor of 100: fio's zoned_abs takes whole percentages)")
	fs.StringVar(&raw.scatterBlock, "scatter-block-size", "256Ki", "cache block in which "+bench.ScatteredTest.ID+" counts the distinct blocks its reads touched (256Ki: ssdcache's)")
	fs.StringVar(&c.IOLogDir, "iolog-dir", os.TempDir(), "directory for fio's I/O log of each "+bench.ScatteredTest.ID+" (read back and removed after the test)")
	fs.Uint64Var(&c.RandSeed, "seed", 20250101, "fio random seed, so every run touches the same blocks in the same order")
	fs.StringVar(&c.SSDReference, "ssd-ref", "", "target name of the raw SSD (fractions and convergence are relative to it)")
	fs.StringVar(&c.HDDReference, "hdd-ref", "", "target name of the raw HDD")
	fs.Float64Var(&c.ConvergeFraction, "converge-fraction", 0.9, "fraction of raw SSD read MB/s that counts as converged")
	fs.StringVar(&c.PlotTest, "plot-test", "", "test plotted in convergence.svg; default the first selected read test")
	fs.DurationVar(&opts.timeLimit, "time-limit", 0, "stop after this long (e.g. 30m) and write the report of what was measured; 0: no limit")
	fs.StringVar(&opts.outputDir, "output-dir", "bench-report", "directory for report.json, report.md and convergence.svg")
	fs.StringVar(&opts.fioBinary, "fio", "fio", "fio binary")
	fs.StringVar(&opts.report.configMap, "report-configmap", "", "also write the report into this ConfigMap (keys report.json, report.md, convergence.svg) through the pod's ServiceAccount; empty: only -output-dir")
	fs.StringVar(&opts.report.namespace, "report-namespace", "", "namespace of -report-configmap; default: $POD_NAMESPACE, else the pod's own namespace (from its ServiceAccount token mount)")
	fs.BoolVar(&opts.printVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if opts.printVersion {
		return opts, nil
	}
	if opts.timeLimit < 0 {
		return opts, fmt.Errorf("time-limit: %s; allowed: 0 (no limit) or a positive duration such as 30m", opts.timeLimit)
	}
	if fs.NArg() > 0 {
		return opts, fmt.Errorf("unexpected arguments %q; every setting is a flag", fs.Args())
	}
	return opts, raw.apply(c)
}

func (raw rawFlags) apply(c *bench.Config) error {
	var err error
	if c.Targets, err = parseTargets(raw.targets, raw.dmDevices); err != nil {
		return err
	}
	cacheSize, err := raw.resolveCacheSize()
	if err != nil {
		return err
	}
	// Working sets on volumes of their own need no offsets.
	ownVolumes := len(c.Targets) > 0 && !slices.ContainsFunc(c.Targets, func(t bench.Target) bool {
		return !strings.Contains(t.Path, bench.WorkingSetPlaceholder)
	})
	disjoint := raw.disjoint && !ownVolumes
	if c.WorkingSets, err = bench.ParseWorkingSets(raw.workingSets, cacheSize, disjoint); err != nil {
		return err
	}
	if c.IOLimit, err = bench.ParseBytes("io-limit", raw.ioLimit); err != nil {
		return err
	}
	if c.ScatterBlockBytes, err = bench.ParseBytes("scatter-block-size", raw.scatterBlock); err != nil {
		return err
	}
	tests := []string(raw.tests)
	if len(tests) == 0 {
		tests = []string{"all"}
		if c.ReadOnly {
			tests = []string{"read"}
		}
	}
	if c.Tests, err = bench.SelectTests(tests); err != nil {
		return err
	}
	if c.PlotTest == "" {
		c.PlotTest = defaultPlotTest(c.Tests)
	}
	return nil
}

// resolveCacheSize is -cache-size in bytes (0 when not given): a quantity as
// is, a percentage of -volume-size as the driver resolves a StorageClass's
// cache size for a volume of that size.
func (raw rawFlags) resolveCacheSize() (int64, error) {
	if raw.cacheSize == "" {
		return 0, nil
	}
	if !strings.HasSuffix(raw.cacheSize, "%") {
		return bench.ParseBytes("cache-size", raw.cacheSize)
	}
	size, err := ssdv1.ParseCacheSize(raw.cacheSize)
	if err != nil {
		return 0, fmt.Errorf("cache-size: %w", err)
	}
	if raw.volumeSize == "" {
		return 0, fmt.Errorf("cache-size: %q is a percentage of the volume, so -volume-size must be given (e.g. 100Gi)", raw.cacheSize)
	}
	volume, err := bench.ParseBytes("volume-size", raw.volumeSize)
	if err != nil {
		return 0, err
	}
	bytes, _, err := size.ResolveCapped(volume)
	if err != nil {
		return 0, fmt.Errorf("cache-size %s of volume-size %s: %w", raw.cacheSize, raw.volumeSize, err)
	}
	return bytes, nil
}

func parseTargets(specs, dmSpecs []string) ([]bench.Target, error) {
	var targets []bench.Target
	index := map[string]int{}
	for _, spec := range specs {
		t, err := bench.ParseTarget(spec)
		if err != nil {
			return nil, err
		}
		index[t.Name] = len(targets)
		targets = append(targets, t)
	}
	for _, spec := range dmSpecs {
		name, device, ok := strings.Cut(spec, "=")
		i, known := index[name]
		if !ok || device == "" || !known {
			return nil, fmt.Errorf("dm-cache %q: want target-name=dm-device with a name given by -target", spec)
		}
		targets[i].DMDevice = device
	}
	return targets, nil
}

func defaultPlotTest(tests []bench.Test) string {
	for _, t := range tests {
		if t.Direction == bench.Read {
			return t.ID
		}
	}
	return tests[0].ID
}
