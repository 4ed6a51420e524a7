package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// A working set measured after its caches were restaged, after
// ssdcache-node was restarted or after the VM rebooted is labelled by its
// cold working set and one of these.
const (
	restagedLabel  = " restaged"
	restartedLabel = " plugin restarted"
	rebootedLabel  = " rebooted"
)

// repeatLabel labels the nth time a step was done and measured: the first
// under the step's own label, the later ones as "<label> #<n>".
func repeatLabel(label string, n int) string {
	if n <= 1 {
		return label
	}
	return fmt.Sprintf("%s #%d", label, n)
}

// disruption splits the label of a restaged, restarted or rebooted set
// into its cold working set, the step's label and which time the step was
// done (1 for the first).
func disruption(label string) (cold, step string, repeat int, ok bool) {
	repeat = 1
	if base, n, found := strings.Cut(label, " #"); found {
		if i, err := strconv.Atoi(n); err == nil && i > 1 {
			label, repeat = base, i
		}
	}
	for _, suffix := range []string{restagedLabel, restartedLabel, rebootedLabel} {
		if cold, ok = strings.CutSuffix(label, suffix); ok {
			return cold, suffix, repeat, true
		}
	}
	return label, "", 0, false
}

// afterDisruption returns the cold working set of a restaged, restarted or
// rebooted one's label.
func afterDisruption(label string) (cold string, ok bool) {
	cold, _, _, ok = disruption(label)
	return cold, ok
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

// restagedSection is report.md's account of the restage, restart and
// reboot steps: each cached target's first run of a test after them,
// against the cold set's warm ceiling and run 1, and how long each took;
// reboot is how the reboot step went down.
func restagedSection(r *bench.Report, restages map[string][]parts.Restage, reboot parts.Reboot) string {
	var rows strings.Builder
	var sets []string
	for _, res := range r.Results {
		cold, after := afterDisruption(res.WorkingSet)
		isReference := res.Target == r.Config.SSDReference || res.Target == r.Config.HDDReference
		if !after || isReference || res.Run != 1 || res.Pass == 0 {
			continue
		}
		var ofColdRun1 *float64
		if i := slices.IndexFunc(r.Results, func(c bench.Result) bool {
			return c.WorkingSet == cold && c.Target == res.Target && c.Test == res.Test && c.Run == 1
		}); i >= 0 {
			ofColdRun1 = bench.Fraction(res.MBps, &r.Results[i].MBps)
		}
		// FractionOfCeiling is over the cold set's warm ceiling, as
		// judgeAgainstColdSets set it.
		fmt.Fprintf(&rows, "| %s | %s | %s | %s | %.1f | %s | %s | %s | %s | %s |\n", res.WorkingSet, res.Target, res.Test,
			num(res.HitRatio), res.MBps, num(res.FractionOfCeiling), warmSpread(r, cold, res.Target, res.Test), num(res.FractionOfSSD), num(ofColdRun1),
			referencePace(r, res.WorkingSet, cold, res.Test))
		sets = append(sets, res.WorkingSet)
	}
	if len(sets) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Run 1 after restage, plugin restart and reboot\n\n")
	// How the caches were disrupted, for the steps the rows show.
	for _, step := range []struct{ label, text string }{
		{restagedLabel, "Restaged (`<set> restaged`): after the working set's cold runs every cache was taken down and brought up again, as a node does when a volume's pod is replaced: " +
			"ssdcache through CSI (NodeUnpublishVolume, NodeUnstageVolume, NodeStageVolume, NodePublishVolume: the cache LVs kept at a clean unstage and their blocks mapped again at stage, the written ones left out), " +
			"lvmcache with `lvchange -an` and `-ay`, bcache by stopping its device and registering the backing device again; then every target ran once more. "},
		{restartedLabel, "Plugin restarted (`<set> plugin restarted`): ssdcache-node was stopped with SIGTERM and started again with its volume staged and published, as a DaemonSet rollout does, and every target ran once more; lvmcache and bcache have no plugin and stay as they were. "},
		{rebootedLabel, rebootText(reboot)},
	} {
		if slices.ContainsFunc(sets, func(ws string) bool { _, s, _, _ := disruption(ws); return s == step.label }) {
			b.WriteString(step.text)
		}
	}
	b.WriteString("Warm ceiling: the cold runs' median MB/s at a read hit ratio of 0.95 or more (`-` where none was that warm, or no dm-cache counters); " +
		"warm runs' MB/s: the lowest and highest of those runs, the spread of one pass over a fully warm cache under emulation, which a run 1 after a plugin restart (cache untouched) can only fall in. " +
		"References' pace: the raw SSD's and the raw HDD's MB/s in the same test after the step over their median in the cold runs; well below 1, the whole machine ran slow while the step was measured, whatever the cache did.\n\n")
	b.WriteString("| working set | target | test | hit ratio | MB/s | of warm ceiling | warm runs' MB/s | of raw SSD | x cold run 1 | references' pace (SSD / HDD) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	b.WriteString(rows.String())
	writeRepeatMedians(&b, r)
	writeRestageTimes(&b, r, restages)
	return b.String()
}

// rebootText describes the reboot step as it was done: a clean shutdown
// or a power cut for ssdcache, and what ssdcache's stage did with the cache.
func rebootText(reboot parts.Reboot) string {
	var b strings.Builder
	if reboot.Kind == parts.CleanReboot {
		b.WriteString("Rebooted (`<set> rebooted`), **a clean shutdown** (`-reboot-kind " + parts.CleanReboot + "`): ssdcache-node was stopped with SIGTERM, as a shutdown stops a node's pods, " +
			"then the pod's bind mount of ssdcache's device was unmounted and the device removed (`dmsetup remove`), as systemd-shutdown unmounts the filesystems and detaches device-mapper devices at a clean reboot (kubelet unstages nothing at a node shutdown), " +
			"and the VM powered off and booted again on the same disks; ")
	} else {
		b.WriteString("Rebooted (`<set> rebooted`), **a power cut for ssdcache** (`-reboot-kind " + parts.PowerCut + "`): ssdcache-node was stopped with SIGTERM, as a shutdown stops a node's pods, " +
			"and ssdcache's cache was left up while the guest synced and the VM powered off without taking its device-mapper table down, and booted again on the same disks; ")
	}
	b.WriteString("lvmcache was deactivated before the power-off, as a clean shutdown does (after a power-off its dm-cache takes every cached block as dirty and writes it back to the HDD the other targets share, or LVM wants a manual repair), and bcache's devices were stopped by its kernel reboot notifier; " +
		"ssdcache came up through NodeStageVolume and NodePublishVolume, ")
	switch {
	case reboot.Kind != parts.CleanReboot:
		b.WriteString("its cache not trusted (no clean removal committed its metadata) and filled from the hot set it had saved last (safety rule 2); ")
	case reboot.Marked:
		b.WriteString("and as the plugin had marked the cache at SIGTERM, the stage kept it if the removal had committed its metadata clean, its blocks mapped again (0 bytes warmed in the table below), or else filled it from the hot set; ")
	default:
		b.WriteString("its cache filled from the hot set: the plugin had not marked it at SIGTERM (its log says why), and an unmarked cache is not trusted even after a clean removal; ")
	}
	b.WriteString("lvmcache through LVM's autoactivation at boot (and `lvchange -ay`), bcache by registering its devices; then every target ran once more. ")
	return b.String()
}

// writeRepeatMedians tables, where a step was done more than once, the
// median of each cached target's run 1 after it against the warm ceiling:
// under emulation one fully warm pass reads anywhere in a wide spread, so
// one run 1 alone may fall below the ceiling by chance.
func writeRepeatMedians(b *strings.Builder, r *bench.Report) {
	type key struct{ cold, step, target, test string }
	var order []key
	samples := map[key][]bench.Result{}
	for _, res := range r.Results {
		cold, step, _, after := disruption(res.WorkingSet)
		if !after || res.Run != 1 || res.FractionOfCeiling == nil {
			continue
		}
		k := key{cold, step, res.Target, res.Test}
		if _, seen := samples[k]; !seen {
			order = append(order, k)
		}
		samples[k] = append(samples[k], res)
	}
	if !slices.ContainsFunc(order, func(k key) bool { return len(samples[k]) > 1 }) {
		return
	}
	b.WriteString("\nRun 1 after each step, over the times the step was done (`<set> <step> #<n>` above): the median, lowest and highest fraction of the warm ceiling, and the lowest hit ratio.\n\n")
	b.WriteString("| working set | step | target | test | times | median of warm ceiling | lowest-highest | lowest hit ratio |\n|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		var fractions []float64
		var lowestHit *float64
		for _, res := range samples[k] {
			fractions = append(fractions, *res.FractionOfCeiling)
			if res.HitRatio != nil && (lowestHit == nil || *res.HitRatio < *lowestHit) {
				lowestHit = res.HitRatio
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %.2f | %.2f-%.2f | %s |\n", k.cold, strings.TrimSpace(k.step), k.target, k.test, len(fractions),
			bench.Median(fractions), slices.Min(fractions), slices.Max(fractions), num(lowestHit))
	}
}

// referencePace is the raw SSD's and raw HDD's MB/s in a test after a
// step over their medians in its cold working set: under emulation the
// whole machine sometimes runs slow for a while (after qemu starts, for
// one), and a cache's run 1 measured then says nothing about the cache.
func referencePace(r *bench.Report, step, cold, test string) string {
	after, before := reference(r, step, test), reference(r, cold, test)
	pace := func(after, before *float64) string {
		if after == nil {
			return "-"
		}
		return num(bench.Fraction(*after, before))
	}
	return pace(after.SSDMBps, before.SSDMBps) + " / " + pace(after.HDDMBps, before.HDDMBps)
}

// reference is a working set's reference figures for a test, empty
// without any.
func reference(r *bench.Report, workingSet, test string) bench.Reference {
	for _, ref := range r.References {
		if ref.WorkingSet == workingSet && ref.Test == test {
			return ref
		}
	}
	return bench.Reference{}
}

// warmSpread is the lowest and highest MB/s of the cold set's fully warm
// runs of a test, "-" without any.
func warmSpread(r *bench.Report, cold, target, test string) string {
	mbps := bench.FullyWarmMBps(r, cold, target, test)
	if len(mbps) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f-%.1f", slices.Min(mbps), slices.Max(mbps))
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
	b.WriteString("\nHow long each restage, restart and reboot took (down: taken down, or the plugin stopped; up: brought up, for ssdcache the cache it kept mapped again or a new one created and filled from the hot set, or the restarted plugin answering Probe; " +
		"warm-up: ssdcache's own account of mapping what it kept, or of copying the hot set and mapping it, without creating the cache's LVs; warmed: the bytes it copied from the HDD, also as a share of the hot set it had saved, the bytes a fill from the HDD copies). " +
		"*x HDD read* is that time over the raw HDD reading the warmed bytes at its " + warmReadTest + " rate in this run.\n\n")
	b.WriteString("| working set | target | down s | up s | warm-up s | warmed MiB | warmed / hot set | up x HDD read | warm-up x HDD read |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, ws := range r.Config.WorkingSets {
		cold, _ := afterDisruption(ws.Label)
		hddMBps := hddRate(r, cold)
		for _, f := range restages[ws.Label] {
			var hddSeconds *float64
			if s := float64(f.WarmBytes) / 1e6 / hddMBps; f.WarmBytes > 0 && hddMBps > 0 {
				hddSeconds = &s
			}
			var hotSet *float64
			if h := float64(f.HotSetBytes); h > 0 {
				hotSet = &h
			}
			// A reboot's power-off is not timed as a take-down; lvmcache and bcache warm nothing up.
			fmt.Fprintf(b, "| %s | %s | %s | %.1f | %s | %.1f | %s | %s | %s |\n", ws.Label, f.Target, seconds(f.DownSeconds), f.UpSeconds, seconds(f.WarmUpSeconds),
				float64(f.WarmBytes)/(1<<20), percent(bench.Fraction(float64(f.WarmBytes), hotSet)), num(bench.Fraction(f.UpSeconds, hddSeconds)), num(bench.Fraction(f.WarmUpSeconds, hddSeconds)))
		}
	}
}

func hddRate(r *bench.Report, workingSet string) float64 {
	if ref := reference(r, workingSet, warmReadTest); ref.HDDMBps != nil {
		return *ref.HDDMBps
	}
	return 0
}

// seconds is a time of the restage table, "-" for none.
func seconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s)
}

// percent is a fraction as a percentage, "-" for none.
func percent(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f %%", 100**f)
}

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *f)
}
