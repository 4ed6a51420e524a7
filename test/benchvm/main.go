// Command benchvm is `make bench`: it boots the kernel VM and measures raw
// HDD, raw SSD, ssdcache (through the real node plugin), lvmcache and bcache
// side by side on the same two disks, one ssdcache-bench invocation per
// working set on freshly created caches plus one cold-write pass, and merges
// them into one report.json, report.md and convergence.svg under
// -output-dir (the per-invocation reports are kept under parts/).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm"
	"github.com/ssdcache/ssdcache/test/vm/job"
)

// options are the flags; their help says what each is.
type options struct {
	outputDir, workDir, dashboard    string
	cacheMiB, volumeGiB              int64
	workingSets                      []string
	readTests                        string
	coldWrites                       bool
	runs, restageRuns, restartRuns   int
	eventRepeats                     int
	treeWorkingSet, rebootWorkingSet string
	// rebootKind is parts.PowerCut or parts.CleanReboot.
	rebootKind                     string
	runtime, timeout, testInterval time.Duration
	reportOnly                     bool
	// scatterZones and ioLimit shape the scattered test (ssdcache-bench
	// -scatter-zones, -io-limit).
	scatterZones int
	ioLimit      string
}

func main() {
	var o options
	var workingSets string
	flag.StringVar(&o.outputDir, "output-dir", "_output/bench", "where report.json, report.md and convergence.svg go")
	flag.StringVar(&o.workDir, "work-dir", "", "VM work dir (disk images, share dir); default a fresh temporary dir, removed afterwards")
	// 1 GiB: a warm sequential pass over a working set takes about a second
	// rather than a tenth (fio measures in milliseconds), and fixed costs of
	// a warm-up or a promotion (cache_restore, table swaps: a second or so
	// under TCG) weigh as they would on a real cache rather than dominate.
	flag.Int64Var(&o.cacheMiB, "cache-mib", 1024, "cache size of every cached target, MiB")
	flag.StringVar(&workingSets, "working-sets", "25%,50%,75%", "working sets as percentages of the cache (50%) or sizes no larger than it (4Gi), each measured on cold caches")
	flag.Int64Var(&o.volumeGiB, "volume-gib", 0, "size of ssdcache's volume, GiB (a sparse HDD image holds it): several TiB shows that no cost grows with the volume; 0: twice the cache, as the references' origins")
	flag.StringVar(&o.readTests, "read-tests", "seq1m-q8t1-read,seq1m-q1t1-read,rnd4k-q1t1-read", "the tests of the convergence runs (ssdcache-bench -tests)")
	flag.BoolVar(&o.coldWrites, "cold-writes", true, "one run of write tests on fresh caches after the working sets, for the cold-miss write overhead")
	flag.IntVar(&o.runs, "runs", 6, "runs per working set")
	flag.IntVar(&o.restageRuns, "restage-runs", 1, "runs per working set after every cache is restaged (ssdcache: NodeUnstage, NodeStage); 0: none")
	flag.IntVar(&o.restartRuns, "restart-runs", 1, "runs per working set after ssdcache-node is restarted with its volume staged; 0: none")
	flag.IntVar(&o.eventRepeats, "event-repeats", 1, "how many times each working set's restage and plugin restart are done, each followed by its runs: one run 1 of a warm cache reads within the wide spread of one pass under emulation, so a verdict on it wants several")
	flag.StringVar(&o.treeWorkingSet, "tree-working-set", "12.5%", "size of the application-load part's tree of files, percent of the cache (12.5%: 128 MiB, about 1,800 files, of a 1 GiB cache); empty: no such part")
	flag.StringVar(&o.rebootWorkingSet, "reboot-working-set", "50%", "working set whose caches are left up at the end of the VM's first boot, which powers off (-reboot-kind) and boots again, for one more run after the reboot; empty: no reboot step")
	// A node's reboot is usually planned (a kernel update, a drain) and
	// clean, the case issue #36 asks to show warm; power-cut shows safety
	// rule 2 (a cache that was not removed cleanly is filled from the HDD).
	flag.StringVar(&o.rebootKind, "reboot-kind", parts.CleanReboot, "how the reboot step goes down after ssdcache-node's SIGTERM: "+parts.CleanReboot+" (what is mounted from ssdcache's device unmounted and the device removed, as systemd-shutdown does at a clean reboot) or "+parts.PowerCut+" (the device left up at the power-off, a power loss for ssdcache)")
	flag.DurationVar(&o.runtime, "runtime", 6*time.Second, "time limit per test: a random 4 KiB pass over the simulated HDD would take minutes; a sequential pass over 75% of a 1 GiB cache at HDD speed takes about 5 s")
	flag.DurationVar(&o.testInterval, "test-interval", 5*time.Second, "pause after each test of ssdcache, lvmcache and bcache (ssdcache-bench -test-interval), as CrystalDiskMark pauses between tests: each cache's background work runs in its own time, as between an application's bursts of reads")
	flag.IntVar(&o.scatterZones, "scatter-zones", 100, "hot zones of the scattered test ("+bench.ScatteredTest.ID+" in -read-tests), spread evenly over each whole target: ssdcache's -volume-gib volume, the others' origins (a divisor of 100)")
	flag.StringVar(&o.ioLimit, "io-limit", "0", "bytes each test reads (ssdcache-bench -io-limit; 0: the working set): the scattered test's reads per pass x 4 KiB")
	flag.BoolVar(&o.reportOnly, "report-only", false, "write report.json, report.md and convergence.svg again from the parts under -output-dir, without the VM (after a change to the report), with the same other flags as the run that measured them")
	flag.StringVar(&o.dashboard, "dashboard", "charts/ssdcache/dashboards/ssdcache.json", "the Grafana dashboard drawn over ssdcache-node's metrics of the run into dashboard.svg")
	flag.DurationVar(&o.timeout, "timeout", 110*time.Minute, "limit for each boot of the VM (the reboot step boots it twice)")
	flag.Parse()
	o.workingSets = strings.Split(workingSets, ",")
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	job.Main("bench", "report in "+o.outputDir, func(ctx context.Context) error { return run(ctx, o) })
}

// validate refuses what the guest would refuse only after the passes
// before it have run.
func (o options) validate() error {
	sets := slices.Clone(o.workingSets)
	if o.treeWorkingSet != "" {
		sets = append(sets, o.treeWorkingSet)
	}
	for _, ws := range sets {
		parsed, err := bench.ParseWorkingSets([]string{ws}, o.cacheMiB<<20, false)
		if err != nil || parsed[0].Bytes > o.cacheMiB<<20 {
			return fmt.Errorf("working set %q: allowed: a percentage of the cache, like 50%%, or a size up to the cache's %d MiB, like 4Gi", ws, o.cacheMiB)
		}
	}
	if o.volumeGiB != 0 && o.volumeGiB<<10 < 2*o.cacheMiB {
		return fmt.Errorf("volume-gib %d: allowed: 0, or at least twice the cache (%d MiB)", o.volumeGiB, o.cacheMiB)
	}
	if o.rebootWorkingSet != "" && !slices.Contains(o.workingSets, o.rebootWorkingSet) {
		return fmt.Errorf("reboot-working-set: %q is not among -working-sets %q; allowed: one of them, or empty for no reboot step", o.rebootWorkingSet, o.workingSets)
	}
	if err := parts.CheckRebootKind(o.rebootKind); err != nil {
		return err
	}
	if o.runs < 1 || o.restageRuns < 0 || o.restartRuns < 0 {
		return fmt.Errorf("runs %d, restage-runs %d, restart-runs %d: allowed: runs 1 or more, the others 0 or more", o.runs, o.restageRuns, o.restartRuns)
	}
	if o.eventRepeats < 1 {
		return fmt.Errorf("event-repeats %d: allowed: 1 or more", o.eventRepeats)
	}
	if _, err := bench.ParseBytes("io-limit", cmp.Or(o.ioLimit, "0")); err != nil {
		return err
	}
	if strings.Contains(o.readTests, bench.ScatteredTest.ID) {
		for _, ws := range o.workingSets {
			sets, _ := bench.ParseWorkingSets([]string{ws}, o.cacheMiB<<20, false)
			if _, err := bench.PlanScatter(o.cacheMiB<<21, sets[0].Bytes, o.scatterZones); err != nil {
				return fmt.Errorf("working set %q: %w", ws, err)
			}
		}
	}
	return nil
}

// volumeMiB is the size of ssdcache's volume.
func (o options) volumeMiB() int64 {
	if o.volumeGiB == 0 {
		return 2 * o.cacheMiB
	}
	return o.volumeGiB << 10
}

func run(ctx context.Context, o options) error {
	if o.reportOnly {
		return writeMerged(ctx, o)
	}
	if err := checkFreeDisk(o); err != nil {
		return err
	}
	job := job.Job{
		Name:         "bench",
		GuestPackage: "github.com/ssdcache/ssdcache/test/benchvm/guest",
		GuestArgs: []string{"-working-sets", strings.Join(o.workingSets, ","), "-volume-mib", fmt.Sprint(o.volumeMiB()),
			"-read-tests", o.readTests, fmt.Sprintf("-cold-writes=%t", o.coldWrites),
			"-runs", fmt.Sprint(o.runs), "-restage-runs", fmt.Sprint(o.restageRuns), "-restart-runs", fmt.Sprint(o.restartRuns), "-event-repeats", fmt.Sprint(o.eventRepeats), "-runtime", o.runtime.String(), "-test-interval", o.testInterval.String(), "-tree-working-set", o.treeWorkingSet, "-reboot-working-set", o.rebootWorkingSet, "-reboot-kind", o.rebootKind,
			"-scatter-zones", fmt.Sprint(o.scatterZones), "-io-limit", cmp.Or(o.ioLimit, "0")},
		CacheMiB: o.cacheMiB,
		// The SSD holds the node's cache pool plus raw SSD, lvmcache and
		// bcache regions; the HDD ssdcache's volume plus three origins of
		// twice the cache (raw HDD, lvmcache, bcache).
		VM: vm.Config{WorkDir: o.workDir, Timeout: o.timeout, SSDSize: (4*o.cacheMiB + 256) << 20,
			HDDSize: max(4<<30, (o.volumeMiB()+6*o.cacheMiB+256)<<20)},
		OutputDir: o.outputDir,
		Collect:   func(guestOut string) error { return saveParts(guestOut, o.outputDir) },
	}
	if o.rebootWorkingSet != "" {
		job.RebootArgs = []string{"-after-reboot"}
	}
	if err := job.Run(ctx); err != nil {
		return err
	}
	return writeMerged(ctx, o)
}

// invocations are the parts the guest writes, in the report's order: each
// working set's cold runs, then its restaged and restarted runs (each pair
// -event-repeats times), its rebooted runs,
// the cold writes, the tree.
func invocations(o options) []part {
	var ps []part
	add := func(name, relabel string) { ps = append(ps, part{dir: partDir(o, name), relabel: relabel}) }
	for _, ws := range o.workingSets {
		name := parts.WorkingSet(ws)
		add(name, "")
		for repeat := 1; repeat <= o.eventRepeats; repeat++ {
			if o.restageRuns > 0 {
				add(parts.Repeat(name+parts.RestagedSuffix, repeat), repeatLabel(ws+restagedLabel, repeat))
			}
			if o.restartRuns > 0 {
				add(parts.Repeat(name+parts.RestartedSuffix, repeat), repeatLabel(ws+restartedLabel, repeat))
			}
		}
		if ws == o.rebootWorkingSet {
			add(name+parts.RebootedSuffix, ws+rebootedLabel)
		}
	}
	if o.coldWrites {
		add(parts.Writes, "cold writes ("+o.workingSets[0]+")")
	}
	if o.treeWorkingSet != "" {
		add(parts.Tree, "tree "+o.treeWorkingSet)
	}
	return ps
}

// partDir is where the guest's part name is kept under -output-dir.
func partDir(o options, name string) string { return filepath.Join(o.outputDir, "parts", name) }

// rebootAccount is how the reboot step's VM went down, as the guest
// recorded it; none without a reboot step.
func rebootAccount(o options) (parts.Reboot, error) {
	if o.rebootWorkingSet == "" {
		return parts.Reboot{}, nil
	}
	return parts.ReadReboot(partDir(o, parts.WorkingSet(o.rebootWorkingSet)+parts.RebootedSuffix))
}

// saveParts copies all the guest wrote (each invocation's report, the
// restage figures, the node's log and metrics) into parts/, in place of an
// earlier run's, whatever happened, so a failed run can be looked at. A
// missing report fails the merge.
func saveParts(out, outputDir string) error {
	dir := filepath.Join(outputDir, "parts")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.CopyFS(dir, os.DirFS(out))
}

func writeMerged(ctx context.Context, o options) error {
	r, restages, err := merge(invocations(o))
	if err != nil {
		return err
	}
	reboot, err := rebootAccount(o)
	if err != nil {
		return err
	}
	judgeAgainstColdSets(r)
	scatteredPromotions(r, o)
	if err := bench.WriteFiles(o.outputDir, r); err != nil {
		return err
	}
	// report.md again, with what pkg/bench cannot know appended.
	var md strings.Builder
	if err := bench.WriteMarkdown(&md, r); err != nil {
		return err
	}
	md.WriteString("\n" + method(r, restages, reboot, drawDashboard(ctx, o, r), o))
	if err := os.WriteFile(filepath.Join(o.outputDir, bench.ReportMarkdown), []byte(withHeadline(md.String(), headline(r, o))), 0o644); err != nil {
		return err
	}
	if r.Error != "" {
		return fmt.Errorf("the benchmark stopped early: %s", r.Error)
	}
	fmt.Println(summary(md.String()))
	return nil
}
