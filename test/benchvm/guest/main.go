// Command guest is `make bench`'s guest side, run inside the VM. It cuts each
// disk into a partition for ssdcache-node's pool and one for a "bench" volume
// group that holds the raw references, lvmcache and bcache, so every target
// sits on the same two disks. For each working set it builds every cache
// cold, runs ssdcache-bench on all five targets side by side and tears the
// caches down. Each invocation's report goes to -output-dir/<part>/ for the
// host to merge.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// writeTests are the tests of the cold-write pass.
const writeTests = "seq1m-q1t1-write,rnd4k-q1t1-write"

type options struct {
	guest.Options
	workingSets string
	// readTests are the convergence runs' tests.
	readTests string
	// coldWrites runs the cold-write pass after the working sets.
	coldWrites bool
	// volumeMiB is ssdcache's volume; the references' origins are twice
	// the cache.
	volumeMiB   int64
	restageRuns int
	restartRuns int
	// eventRepeats is how many times each working set's restage and
	// plugin restart are done and measured.
	eventRepeats int
	// treeWorkingSet is the application-load part's tree size ("": none).
	treeWorkingSet string
	// rebootWorkingSet is measured last, its caches left up for the VM's
	// next boot, which runs it once more after the reboot ("": none).
	rebootWorkingSet string
	// rebootKind is how the VM goes down for the reboot step:
	// parts.PowerCut or parts.CleanReboot (reboot.go).
	rebootKind string
	// testInterval is ssdcache-bench's -test-interval.
	testInterval time.Duration
	// scatterZones and ioLimit are ssdcache-bench's -scatter-zones and
	// -io-limit, for the scattered test.
	scatterZones int
	ioLimit      string
}

func main() {
	var o options
	o.Register(flag.CommandLine, "bench", 4*time.Second)
	flag.StringVar(&o.workingSets, "working-sets", "25%,50%,75%", "working sets (percent of the cache, or sizes), each on cold caches")
	flag.StringVar(&o.readTests, "read-tests", "seq1m-q8t1-read,seq1m-q1t1-read,rnd4k-q1t1-read", "the convergence runs' tests")
	flag.BoolVar(&o.coldWrites, "cold-writes", true, "run the cold-write pass")
	flag.Int64Var(&o.volumeMiB, "volume-mib", 0, "ssdcache's volume, MiB; 0: twice the cache")
	flag.IntVar(&o.restageRuns, "restage-runs", 1, "runs after every cache is restaged (ssdcache: NodeUnstage and NodeStage), per working set; 0: no restage step")
	flag.StringVar(&o.treeWorkingSet, "tree-working-set", "50%", "size of the application-load part's tree of files (percent of the cache); empty: no such part")
	flag.IntVar(&o.restartRuns, "restart-runs", 1, "runs after ssdcache-node is restarted with every volume staged, per working set; 0: no restart step")
	flag.IntVar(&o.eventRepeats, "event-repeats", 1, "how many times each working set's restage and plugin restart are done, each followed by its runs")
	flag.StringVar(&o.rebootWorkingSet, "reboot-working-set", "50%", "working set measured last, its caches left up for the VM's next boot (-after-reboot); empty: no reboot step")
	flag.StringVar(&o.rebootKind, "reboot-kind", parts.CleanReboot, "how the VM goes down for the reboot step: "+parts.CleanReboot+" (ssdcache's device removed first, as a clean shutdown does) or "+parts.PowerCut+" (left up, a power loss for ssdcache)")
	flag.DurationVar(&o.testInterval, "test-interval", 0, "pause after each test of a cached target (ssdcache-bench -test-interval)")
	flag.IntVar(&o.scatterZones, "scatter-zones", 100, "hot zones of the scattered test (ssdcache-bench -scatter-zones)")
	flag.StringVar(&o.ioLimit, "io-limit", "0", "bytes per test (ssdcache-bench -io-limit; 0: the working set)")
	flag.Parse()
	if err := parts.CheckRebootKind(o.rebootKind); err != nil {
		fmt.Fprintln(os.Stderr, "bench guest:", err)
		os.Exit(2)
	}
	guest.Main(&o.Options, func(ctx context.Context) error { return run(ctx, o) })
}

// layout is where every target lives.
type layout struct {
	rawHDD, rawSSD string
	// ssdPVs are the SSD's partitions: the node's cache pool, the bench VG.
	ssdPVs   []string
	ssdcache *ssdcacheLayer
	caches   []cache
}

const benchVG = "bench"

func run(ctx context.Context, o options) error {
	originMiB := 2 * o.CacheMiB
	o.volumeMiB = cmp.Or(o.volumeMiB, originMiB)
	n, err := guest.StartNode(ctx, &o.Options, []int64{o.volumeMiB + 64, 3*originMiB + 64}, []int64{o.CacheMiB + 64, 3*o.CacheMiB + 128})
	if err != nil {
		return err
	}
	defer n.Plugin.Stop()
	o.Step("ssdcache-node pools on %s and %s", n.HDDParts[0], n.SSDParts[0])
	stopRecording, err := recordMetrics(ctx, o)
	if err != nil {
		return err
	}
	defer stopRecording()
	l, err := benchLayout(ctx, o, n.Plugin, n.HDDParts[1], n.SSDParts[1], originMiB)
	if err != nil {
		return err
	}
	l.ssdPVs = n.SSDParts
	if o.AfterReboot {
		return afterReboot(ctx, o, l)
	}
	for _, ws := range strings.Split(o.workingSets, ",") {
		if ws == o.rebootWorkingSet {
			continue // last, below
		}
		if err := pass(ctx, o, l, parts.WorkingSet(ws), o.Runs, readArgs(o, ws), true); err != nil {
			return err
		}
	}
	if o.coldWrites {
		first := strings.Split(o.workingSets, ",")[0]
		if err := pass(ctx, o, l, parts.Writes, 1, []string{"-working-sets", first, "-tests", writeTests}, false); err != nil {
			return err
		}
	}
	if o.treeWorkingSet != "" {
		if err := treePass(ctx, o, l, parts.Tree); err != nil {
			return err
		}
	}
	if o.rebootWorkingSet == "" {
		return nil
	}
	return beforeReboot(ctx, o, l)
}

func readArgs(o options, ws string) []string {
	return []string{"-working-sets", ws, "-read-only", "-tests", o.readTests, "-scatter-zones", fmt.Sprint(o.scatterZones), "-io-limit", o.ioLimit}
}

// benchLayout makes the bench VG on the second partitions and the raw
// reference LVs, which stay for the whole run (after a reboot, it
// activates them).
func benchLayout(ctx context.Context, o options, p *guest.Plugin, hddPV, ssdPV string, originMiB int64) (layout, error) {
	setup := [][]string{{"modprobe", "bcache"}, {"pvcreate", "--yes", hddPV, ssdPV}, {"vgcreate", "--yes", benchVG, hddPV, ssdPV}}
	if o.AfterReboot { // the first boot made them; udev's LVM autoactivation (test/vm/README.md) has usually activated them
		setup = [][]string{{"modprobe", "bcache"}, {"lvchange", "-ay", benchVG + "/raw_hdd", benchVG + "/raw_ssd"}}
	}
	for _, args := range setup {
		if _, err := guest.Run(ctx, args[0], args[1:]...); err != nil {
			return layout{}, err
		}
	}
	if !o.AfterReboot {
		if err := lvcreate(ctx, "raw_hdd", originMiB, hddPV); err != nil {
			return layout{}, err
		}
		if err := lvcreate(ctx, "raw_ssd", o.CacheMiB, ssdPV); err != nil {
			return layout{}, err
		}
	}
	s := &ssdcacheLayer{plugin: p, volumeBytes: o.volumeMiB << 20, cacheSize: fmt.Sprintf("%dMi", o.CacheMiB), stateDir: o.StateDir}
	r := regions{hddPV: hddPV, ssdPV: ssdPV, originMiB: originMiB, cacheMiB: o.CacheMiB}
	return layout{rawHDD: "/dev/" + benchVG + "/raw_hdd", rawSSD: "/dev/" + benchVG + "/raw_ssd", ssdcache: s,
		caches: []cache{s, &lvmcacheLayer{r}, &bcacheLayer{regions: r, link: filepath.Join(o.WorkDir, "bcache"), step: o.Step}}}, nil
}

// pass builds every cache cold, runs ssdcache-bench once over all targets
// (runs runs; extra names the rest), then, with disrupt, restages every
// cache and runs again into part-restage, restarts ssdcache-node and runs
// again into part-restart (each only if its runs are not 0, the pair
// eventRepeats times: parts.Repeat names the later ones), and tears the
// caches down again.
func pass(ctx context.Context, o options, l layout, part string, runs int, extra []string, disrupt bool) error {
	err := passUp(ctx, o, l, part, runs, extra, disrupt)
	if err = errors.Join(err, destroyCaches(ctx, l, part)); err != nil {
		return err
	}
	return discardFreeSSD(ctx, o, l)
}

// discardFreeSSD discards the SSD's free extents in every volume group on it
// (the node's cache pool and the bench VG), so that the host's sparse SSD
// image (qemu discard=unmap) gives back the blocks the caches just dropped:
// without it a run of 16 GiB working sets would leave 16 GiB a cache
// allocated on the host for every set.
func discardFreeSSD(ctx context.Context, o options, l layout) error {
	for _, pv := range l.ssdPVs {
		vg, err := guest.Run(ctx, "pvs", "--noheadings", "-o", "vg_name", pv)
		if vg = strings.TrimSpace(vg); err != nil || vg == "" {
			return errors.Join(err, fmt.Errorf("no volume group on %s", pv))
		}
		if free, err := guest.Run(ctx, "pvs", "--noheadings", "--units", "b", "--nosuffix", "-o", "pv_free", pv); err != nil || strings.TrimSpace(free) == "0" {
			continue
		}
		steps := [][]string{{"lvcreate", "--yes", "-l", "100%PVS", "-n", "discardfree", vg, pv}, {"blkdiscard", "/dev/" + vg + "/discardfree"}, {"lvremove", "--yes", vg + "/discardfree"}}
		for _, args := range steps {
			if _, err := guest.Run(ctx, args[0], args[1:]...); err != nil {
				return fmt.Errorf("discarding the free space of %s: %w", pv, err)
			}
		}
	}
	o.Step("discarded the SSD's free extents")
	return nil
}

// passUp is pass without tearing the caches down.
func passUp(ctx context.Context, o options, l layout, part string, runs int, extra []string, disrupt bool) error {
	targets, err := createCaches(ctx, o, l, part)
	var before parts.Origin
	if err == nil {
		before, err = l.ssdcache.originReads(ctx)
	}
	if err == nil {
		err = o.RunBench(ctx, benchArgs(o, targetArgs(targets), part, runs, extra))
	}
	if err == nil {
		err = writeOriginReads(ctx, o, l, part, before)
	}
	if !disrupt {
		return err
	}
	steps := []struct {
		suffix string
		runs   int
		do     func(context.Context, options, layout, string) error
	}{{parts.RestagedSuffix, o.restageRuns, restage}, {parts.RestartedSuffix, o.restartRuns, restartPlugin}}
	for repeat := 1; repeat <= o.eventRepeats; repeat++ {
		for _, d := range steps {
			if err != nil || d.runs == 0 {
				continue
			}
			name := parts.Repeat(part+d.suffix, repeat)
			if err = d.do(ctx, o, l, name); err == nil {
				err = o.RunBench(ctx, benchArgs(o, targetArgs(targets), name, d.runs, extra))
			}
		}
	}
	return err
}

// writeOriginReads records what ssdcache's origin read since before, beside
// part's report.
func writeOriginReads(ctx context.Context, o options, l layout, part string, before parts.Origin) error {
	after, err := l.ssdcache.originReads(ctx)
	if err != nil {
		return err
	}
	if after.Device != before.Device {
		return fmt.Errorf("%s: ssdcache's origin was %s and is %s", part, before.Device, after.Device)
	}
	return parts.WriteOrigin(filepath.Join(o.OutputDir, part), parts.Origin{Device: after.Device, ReadBytes: after.ReadBytes - before.ReadBytes,
		BlockBytes: max(before.BlockBytes, after.BlockBytes)})
}

// benchTarget is one ssdcache-bench -target, with its dm-cache device if any.
type benchTarget struct{ name, path, dmName string }

// rawTargets are the raw references, which every invocation measures first.
func (l layout) rawTargets() []benchTarget {
	return []benchTarget{{name: "raw-hdd", path: l.rawHDD}, {name: "raw-ssd", path: l.rawSSD}}
}

// createCaches builds every cache cold and returns all targets, the raw
// references first.
func createCaches(ctx context.Context, o options, l layout, part string) ([]benchTarget, error) {
	o.Step("%s: creating cold caches", part)
	targets := l.rawTargets()
	for _, c := range l.caches {
		t, err := c.Create(ctx)
		if err != nil {
			return targets, fmt.Errorf("%s: creating %s: %w", part, c.Name(), err)
		}
		targets = append(targets, t)
		o.Step("%s: %s at %s", part, c.Name(), t.path)
	}
	describe(ctx, o, part)
	return targets, nil
}

func destroyCaches(ctx context.Context, l layout, part string) error {
	var errs []error
	for _, c := range l.caches {
		if err := c.Destroy(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: removing %s: %w", part, c.Name(), err))
		}
	}
	return errors.Join(errs...)
}

func targetArgs(targets []benchTarget) []string {
	var args []string
	for _, t := range targets {
		args = append(args, "-target", t.name+"="+t.path)
		if t.dmName != "" {
			args = append(args, "-dm-cache", t.name+"="+t.dmName)
		}
	}
	return args
}

func benchArgs(o options, targets []string, part string, runs int, extra []string) []string {
	args := append([]string{}, targets...)
	args = append(args, "-ssd-ref", "raw-ssd", "-hdd-ref", "raw-hdd", "-cache-size", fmt.Sprintf("%dMi", o.CacheMiB),
		"-runtime", o.Runtime.String(), "-test-interval", o.testInterval.String(), "-output-dir", filepath.Join(o.OutputDir, part), "-runs", fmt.Sprint(runs))
	return append(args, extra...)
}

// restage takes every cache down and up again and records how long each
// took beside the report of part (the restaged part).
func restage(ctx context.Context, o options, l layout, part string) error {
	var figures []parts.Restage
	for _, c := range l.caches {
		f, err := c.Restage(ctx)
		if err != nil {
			return fmt.Errorf("%s: restaging %s: %w", part, c.Name(), err)
		}
		o.Step("%s: %s restaged: down %.1fs, up %.1fs, %d bytes warmed", part, c.Name(), f.DownSeconds, f.UpSeconds, f.WarmBytes)
		figures = append(figures, f)
	}
	return parts.WriteRestage(filepath.Join(o.OutputDir, part), figures)
}

// restartPlugin restarts ssdcache-node with its volume staged and published,
// as a DaemonSet rollout does, and records how long it took beside the
// report of part. lvmcache and bcache have no plugin: they stay as they are.
func restartPlugin(ctx context.Context, o options, l layout, part string) error {
	s := l.ssdcache
	down, up, err := s.plugin.Restart(ctx)
	if err != nil {
		return fmt.Errorf("%s: restarting ssdcache-node: %w", part, err)
	}
	o.Step("%s: ssdcache-node restarted: stopped in %.1fs, answered in %.1fs", part, down.Seconds(), up.Seconds())
	f := parts.Restage{Target: s.Name(), DownSeconds: down.Seconds(), UpSeconds: up.Seconds()}
	return parts.WriteRestage(filepath.Join(o.OutputDir, part), []parts.Restage{f})
}

// describe logs the device-mapper tables and bcache settings, so the report
// shows what each cache really was.
func describe(ctx context.Context, o options, part string) {
	if out, err := guest.Run(ctx, "dmsetup", "table"); err == nil {
		o.Step("%s: dm tables:\n%s", part, out)
	}
	for _, f := range []string{"cache_mode", "sequential_cutoff"} {
		if data, err := os.ReadFile("/sys/block/bcache0/bcache/" + f); err == nil {
			o.Step("%s: bcache0 %s: %s", part, f, strings.TrimSpace(string(data)))
		}
	}
}
