package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// restagedLabel and restartedLabel end the label of a working set measured
// after its caches were restaged or after ssdcache-node was restarted; the
// rest of the label names its cold working set.
const (
	restagedLabel  = " restaged"
	restartedLabel = " plugin restarted"
	rebootedLabel  = " rebooted"
)

// afterDisruption returns the cold working set of a restaged, restarted or
// rebooted one's label.
func afterDisruption(label string) (cold string, ok bool) {
	for _, suffix := range []string{restagedLabel, restartedLabel, rebootedLabel} {
		if cold, ok = strings.CutSuffix(label, suffix); ok {
			return cold, true
		}
	}
	return label, false
}

// restagedRow is a cached target's first read of a test after its cache was
// restaged, against the same working set's cold runs.
type restagedRow struct {
	workingSet, target, test string
	hitRatio                 *float64
	mbps                     float64
	// ofCeiling is over the cold runs' warm ceiling (their median MB/s at a
	// hit ratio of 0.95 or more), ofColdRun1 over the cold run 1.
	ofCeiling, ofSSD, ofColdRun1 *float64
}

type resultKey struct{ workingSet, target, test string }

// judgeAgainstColdSets: a restaged, restarted or rebooted set runs once,
// warm from its start, so its own runs cannot set its warm ceiling (they
// would be judged against themselves) and its run 1 is no cold miss. Its
// results are judged against its cold set's ceiling, and its warm-up and
// overhead rows are left to restagedSection, which compares it there.
func judgeAgainstColdSets(r *bench.Report) {
	ceiling := map[resultKey]*float64{}
	for _, w := range r.Warmth {
		ceiling[resultKey{w.WorkingSet, w.Target, w.Test}] = w.CeilingMBps
	}
	for i := range r.Results {
		res := &r.Results[i]
		if cold, after := afterDisruption(res.WorkingSet); after {
			res.FractionOfCeiling = bench.Fraction(res.MBps, ceiling[resultKey{cold, res.Target, res.Test}])
		}
	}
	disrupted := func(ws string) bool { _, after := afterDisruption(ws); return after }
	r.Warmth = slices.DeleteFunc(r.Warmth, func(w bench.Warmth) bool { return disrupted(w.WorkingSet) })
	r.Overhead = slices.DeleteFunc(r.Overhead, func(o bench.Overhead) bool { return disrupted(o.WorkingSet) })
}

// restagedRows reads each row's fraction of the warm ceiling from its
// result, as judgeAgainstColdSets set it.
func restagedRows(r *bench.Report) []restagedRow {
	coldRun1 := map[resultKey]float64{}
	for _, res := range r.Results {
		if res.Run == 1 {
			coldRun1[resultKey{res.WorkingSet, res.Target, res.Test}] = res.MBps
		}
	}
	var rows []restagedRow
	for _, res := range r.Results {
		cold, after := afterDisruption(res.WorkingSet)
		isReference := res.Target == r.Config.SSDReference || res.Target == r.Config.HDDReference
		if !after || isReference || res.Run != 1 || res.Pass == 0 {
			continue
		}
		k := resultKey{cold, res.Target, res.Test}
		row := restagedRow{workingSet: res.WorkingSet, target: res.Target, test: res.Test,
			hitRatio: res.HitRatio, mbps: res.MBps, ofCeiling: res.FractionOfCeiling, ofSSD: res.FractionOfSSD}
		if run1, ok := coldRun1[k]; ok {
			row.ofColdRun1 = bench.Fraction(res.MBps, &run1)
		}
		rows = append(rows, row)
	}
	return rows
}

// restagedSection is report.md's account of the restage step: how long
// each restage took, and the first run after it.
func restagedSection(r *bench.Report, restages map[string][]parts.Restage) string {
	rows := restagedRows(r)
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Run 1 after restage, plugin restart and reboot\n\n")
	b.WriteString(disruptionsText(rows))
	b.WriteString("| working set | target | test | hit ratio | MB/s | of warm ceiling | of raw SSD | x cold run 1 |\n|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %s | %s | %s |\n", row.workingSet, row.target, row.test,
			num(row.hitRatio), row.mbps, num(row.ofCeiling), num(row.ofSSD), num(row.ofColdRun1))
	}
	writeRestageTimes(&b, r, restages)
	return b.String()
}

// disruptionsText says how the caches were disrupted, for the steps the
// rows show.
func disruptionsText(rows []restagedRow) string {
	var restaged, restarted, rebooted bool
	for _, row := range rows {
		restaged = restaged || strings.HasSuffix(row.workingSet, restagedLabel)
		restarted = restarted || strings.HasSuffix(row.workingSet, restartedLabel)
		rebooted = rebooted || strings.HasSuffix(row.workingSet, rebootedLabel)
	}
	var b strings.Builder
	if restaged {
		b.WriteString("Restaged (`<set> restaged`): after the working set's cold runs every cache was taken down and brought up again, as a node does when a volume's pod is replaced: " +
			"ssdcache through CSI (NodeUnpublishVolume, NodeUnstageVolume, NodeStageVolume, NodePublishVolume: the hot set saved at unstage, the new cache filled from it at stage), " +
			"lvmcache with `lvchange -an` and `-ay`, bcache by stopping its device and registering the backing device again; then every target ran once more. ")
	}
	if restarted {
		b.WriteString("Plugin restarted (`<set> plugin restarted`): ssdcache-node was stopped with SIGTERM and started again with its volume staged and published, as a DaemonSet rollout does, and every target ran once more; lvmcache and bcache have no plugin and stay as they were. ")
	}
	if rebooted {
		b.WriteString("Rebooted (`<set> rebooted`): the caches were left up while the VM's guest program exited (ssdcache-node stopped with SIGTERM), the guest synced and powered off without taking any device-mapper table down, and booted again on the same disks; " +
			"ssdcache came up through NodeStageVolume and NodePublishVolume, filled from the hot set it had saved last, lvmcache through LVM's autoactivation at boot (and `lvchange -ay`), bcache by registering its devices; then every target ran once more. ")
	}
	b.WriteString("Warm ceiling: the cold runs' median MB/s at a read hit ratio of 0.95 or more (`-` where none was that warm, or no dm-cache counters).\n\n")
	return b.String()
}

// warmReadTest is the raw HDD read a warm-up is compared with: one stream,
// large blocks, as the warm-up reads the hot set in origin order.
const warmReadTest = "seq1m-q1t1-read"

// writeRestageTimes tables each restage's time; a warm-up is also given
// against the raw HDD reading the same bytes at its sequential rate.
func writeRestageTimes(b *strings.Builder, r *bench.Report, restages map[string][]parts.Restage) {
	if len(restages) == 0 {
		return
	}
	b.WriteString("\nHow long each restage, restart and reboot took (down: taken down, or the plugin stopped; up: brought up, for ssdcache the new cache created and filled from the hot set, or the restarted plugin answering Probe; " +
		"warm-up: ssdcache's own account of copying the hot set and mapping it, without creating the cache's LVs). " +
		"*x HDD read* is that time over the raw HDD reading the warmed bytes at its " + warmReadTest + " rate in this run.\n\n")
	b.WriteString("| working set | target | down s | up s | warm-up s | warmed MiB | up x HDD read | warm-up x HDD read |\n|---|---|---|---|---|---|---|---|\n")
	for _, ws := range r.Config.WorkingSets {
		cold, _ := afterDisruption(ws.Label)
		hddMBps := hddRate(r, cold)
		for _, f := range restages[ws.Label] {
			var hddSeconds *float64
			if f.WarmBytes > 0 && hddMBps > 0 {
				hddSeconds = ptr(float64(f.WarmBytes) / 1e6 / hddMBps)
			}
			warmUp := "-"
			if f.WarmUpSeconds > 0 {
				warmUp = fmt.Sprintf("%.1f", f.WarmUpSeconds)
			}
			down := "-" // a reboot takes nothing down
			if f.DownSeconds > 0 {
				down = fmt.Sprintf("%.1f", f.DownSeconds)
			}
			fmt.Fprintf(b, "| %s | %s | %s | %.1f | %s | %.1f | %s | %s |\n", ws.Label, f.Target, down, f.UpSeconds, warmUp,
				float64(f.WarmBytes)/(1<<20), num(bench.Fraction(f.UpSeconds, hddSeconds)), num(bench.Fraction(f.WarmUpSeconds, hddSeconds)))
		}
	}
}

func hddRate(r *bench.Report, workingSet string) float64 {
	for _, ref := range r.References {
		if ref.WorkingSet == workingSet && ref.Test == warmReadTest && ref.HDDMBps != nil {
			return *ref.HDDMBps
		}
	}
	return 0
}

func ptr(f float64) *float64 { return &f }

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *f)
}
