// Command demo is `make demo`: it builds ssdcache-node, ssdcache-bench and
// the demo's guest program, boots the kernel VM with an emulated NVMe and a
// simulated HDD, and inside provisions, stages and publishes a cached volume
// through the real node plugin's CSI API, then repeats a read test on it
// beside the raw SSD and raw HDD, restages the volume and runs once more. It
// prints a table per test: run, MB/s, fraction of raw SSD, cache hit ratio
// and promotions, then the run after restage, and keeps the full reports
// under -output-dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm"
	"github.com/ssdcache/ssdcache/test/vm/job"
)

type options struct {
	outputDir, workDir string
	cacheMiB           int64
	runs               int
	runtime, timeout   time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.outputDir, "output-dir", "_output/demo", "where the report, logs and plot go")
	flag.StringVar(&o.workDir, "work-dir", "", "VM work dir (disk images, share dir), kept afterwards; default a fresh temporary dir, removed afterwards")
	flag.Int64Var(&o.cacheMiB, "cache-mib", 256, "the volume's cache size in MiB; the working set is half of it")
	flag.IntVar(&o.runs, "runs", 6, "repeated runs of the read tests")
	flag.DurationVar(&o.runtime, "runtime", 8*time.Second, "time limit per test (a random 4 KiB pass over the HDD would take minutes)")
	flag.DurationVar(&o.timeout, "timeout", 25*time.Minute, "limit for the VM's whole run")
	flag.Parse()
	job.Main("demo", "full report in "+o.outputDir, func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o options) error {
	job := job.Job{
		Name:         "demo",
		GuestPackage: "github.com/ssdcache/ssdcache/test/demo/guest",
		GuestArgs:    []string{"-runs", fmt.Sprint(o.runs), "-runtime", o.runtime.String()},
		CacheMiB:     o.cacheMiB,
		VM:           vm.Config{WorkDir: o.workDir, Timeout: o.timeout},
		OutputDir:    o.outputDir,
		Collect:      func(guestOut string) error { return collect(guestOut, o.outputDir) },
	}
	if err := job.Run(ctx); err != nil {
		return err
	}
	// The cold runs, then the run after restage: the cache the plugin kept
	// at unstage, mapped again at stage.
	for _, step := range []struct {
		dir, title string
		runs       int
	}{{"", "", o.runs}, {restagedDir, "after restage (NodeUnstageVolume, NodeStageVolume: the cache kept at unstage mapped again)", 1}} {
		r, err := parts.ReadReport(filepath.Join(o.outputDir, step.dir))
		if err != nil {
			return err
		}
		if err := check(r, step.runs); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(o.outputDir, step.dir), err)
		}
		printTables(os.Stdout, step.title, r)
	}
	return nil
}

// restagedDir holds the report of the run after the volume was restaged.
const restagedDir = "restaged"

// collect keeps the node's log even when the report is missing.
func collect(guestOut, outputDir string) error {
	_ = job.CopyFiles(guestOut, outputDir, "ssdcache-node.log")
	for _, dir := range []string{"", restagedDir} {
		err := job.CopyFiles(filepath.Join(guestOut, dir), filepath.Join(outputDir, dir), bench.ReportJSON, bench.ReportMarkdown, bench.ConvergenceSVG)
		if err != nil {
			return fmt.Errorf("collecting the report: %w", err)
		}
	}
	return nil
}

// check fails the demo when the report does not show what it claims: every
// run measured on the cached volume, with dm-cache counters (so the volume
// really was a dm-cache device), and both references present.
func check(r *bench.Report, runs int) error {
	if r.Error != "" {
		return fmt.Errorf("the benchmark stopped early: %s", r.Error)
	}
	for _, t := range r.Config.Tests {
		got := 0
		for _, res := range cachedResults(r, t.ID) {
			if res.Counters == nil {
				return fmt.Errorf("run %d of %s on the volume has no dm-cache counters: the volume is not a dm-cache device", res.Run, t.ID)
			}
			if res.FractionOfSSD == nil {
				return fmt.Errorf("run %d of %s has no raw SSD reference", res.Run, t.ID)
			}
			got++
		}
		if got != runs {
			return fmt.Errorf("%s: %d runs on the volume in the report, want %d", t.ID, got, runs)
		}
	}
	return nil
}

const volumeTarget = "ssdcache"

func cachedResults(r *bench.Report, test string) []bench.Result {
	var out []bench.Result
	for _, res := range r.Results {
		if res.Target == volumeTarget && res.Test == test {
			out = append(out, res)
		}
	}
	return out
}

func printTables(w io.Writer, title string, r *bench.Report) {
	if title != "" {
		fmt.Fprintf(w, "\n%s:", title)
	}
	ws := r.Config.WorkingSets[0]
	fmt.Fprintf(w, "\nssdcache volume, %s working set (%d MiB), %d runs, same blocks every run (fio seed %d)\n",
		ws.Label, ws.Bytes>>20, r.Config.Runs, r.Config.RandSeed)
	for _, t := range r.Config.Tests {
		var ref bench.Reference
		if i := slices.IndexFunc(r.References, func(ref bench.Reference) bool { return ref.WorkingSet == ws.Label && ref.Test == t.ID }); i >= 0 {
			ref = r.References[i]
		}
		fmt.Fprintf(w, "\n%s: raw SSD %s MB/s, raw HDD %s MB/s (medians, same run)\n", t.Label, num(ref.SSDMBps, 1), num(ref.HDDMBps, 1))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\tMB/s\tof raw SSD\tof raw HDD\thit ratio\tpromotions\t")
		for _, res := range cachedResults(r, t.ID) {
			fmt.Fprintf(tw, "%d\t%.1f\t%s\t%s\t%s\t%d\t\n", res.Run, res.MBps, num(res.FractionOfSSD, 2),
				num(res.FractionOfHDD, 2), num(res.HitRatio, 2), res.Counters.Promotions)
		}
		tw.Flush()
	}
	for _, c := range r.Convergence {
		if c.Target != volumeTarget {
			continue
		}
		when := "not within the runs"
		if c.RunsToConverge != nil {
			when = fmt.Sprintf("run %d", *c.RunsToConverge)
		}
		fmt.Fprintf(w, "%s: %.0f%% of raw SSD reached: %s (last run %s of raw SSD)\n",
			c.Test, 100*r.Config.ConvergeFraction, when, num(c.LastFractionOfSSD, 2))
	}
}

func num(f *float64, decimals int) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, *f)
}
