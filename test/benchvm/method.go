package main

import (
	"fmt"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// method is what report.md adds to pkg/bench's report: the restaged
// section, the dashboard's, and how this report was made: what pkg/bench
// cannot know (the disk layout, cold caches per working set, the emulated
// disks) but a reader needs to judge the figures.
func method(r *bench.Report, restages map[string][]parts.Restage, reboot parts.Reboot, dashboardNote string, o options) string {
	var b strings.Builder
	if section := restagedSection(r, restages, reboot); section != "" {
		b.WriteString(section + "\n")
	}
	if dashboardNote != "" {
		b.WriteString(dashboardNote + "\n")
	}
	fmt.Fprintf(&b, "## How `make bench` made this report\n\n")
	fmt.Fprintf(&b, "- Disks: qemu (TCG) emulated NVMe and a simulated HDD (positional seek/rotation model, test/vm/hddsim). ")
	fmt.Fprintf(&b, "Each disk has two partitions: one for ssdcache-node's pool, one for a `bench` volume group holding the raw references, lvmcache and bcache.\n")
	fmt.Fprintf(&b, "- Every cached target has a %d MiB cache on the NVMe; ssdcache's volume is %d MiB on the HDD (a sparse image: unwritten blocks read as zeros through the simulated head), lvmcache's and bcache's origins and the raw HDD %d MiB: ", o.cacheMiB, o.volumeMiB(), 2*o.cacheMiB)
	b.WriteString("ssdcache through CSI CreateVolume (`ssdcache.io/cache-mode=readcache`), NodeStageVolume and NodePublishVolume (raw block); ")
	b.WriteString("lvmcache with a cache pool (`lvcreate --type cache-pool`) and `lvconvert --type cache --cachemode writethrough` (default smq policy and chunk size); ")
	b.WriteString("bcache with `make-bcache -B -C` (writethrough), tuned as its users tune a read cache: `sequential_cutoff` 0 and the congested read and write thresholds 0, so no read bypasses it")
	if o.cacheMiB*2 <= 1024 {
		b.WriteString(", except a smaller bucket so the cache has more than 512 buckets, which Linux requires")
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "- Every working set ran on caches created cold for it (one ssdcache-bench invocation each, merged here); %d runs, read-only. ", o.runs)
	if o.runtime > 0 {
		fmt.Fprintf(&b, "Each test stops after %v, so random 4 KiB tests cover the first part of the same fixed-seed sequence each run rather than the whole working set.\n", o.runtime)
	} else {
		b.WriteString("Each test is one whole pass over its working set (no time limit).\n")
	}
	if o.restageRuns > 0 {
		fmt.Fprintf(&b, "- After each working set's cold runs every cache was restaged and every target ran %d more run(s): *Run 1 after restage, plugin restart and reboot* above; the working set `<set>%s`.\n", o.restageRuns, restagedLabel)
	}
	if o.restartRuns > 0 {
		fmt.Fprintf(&b, "- Then ssdcache-node was restarted (SIGTERM, started again) with its volume staged and published, and every target ran %d more run(s): the working set `<set>%s`.\n", o.restartRuns, restartedLabel)
	}
	if o.eventRepeats > 1 && o.restageRuns+o.restartRuns > 0 {
		fmt.Fprintf(&b, "- Those steps were done %d times in turn, each followed by its runs: the working sets `<set> <step> #2` and on; *Run 1 after restage, plugin restart and reboot* gives each step's median.\n", o.eventRepeats)
	}
	if o.rebootWorkingSet != "" {
		how := "ssdcache-node was stopped with SIGTERM and ssdcache's device left up while the VM powered off, a power cut for ssdcache (`-reboot-kind " + parts.PowerCut + "`)"
		if reboot.Kind == parts.CleanReboot {
			how = "ssdcache-node was stopped with SIGTERM and ssdcache's device unmounted and removed before the VM powered off, as a clean shutdown does (`-reboot-kind " + parts.CleanReboot + "`)"
		}
		fmt.Fprintf(&b, "- The working set %s ran last, then %s, and the VM booted again on the same disks (ssdcache-node's `--state-dir` on the VM's share, as a node's on its root disk); lvmcache was deactivated before, as a clean shutdown does; every target ran once more: the working set `%s%s`.\n", o.rebootWorkingSet, how, o.rebootWorkingSet, rebootedLabel)
	}
	if o.coldWrites {
		b.WriteString("- The cold-write working set is one run of write tests on fresh caches, for the cold-miss write overhead rows.\n")
	}
	if o.treeWorkingSet != "" {
		fmt.Fprintf(&b, "- The working set `tree %s` is the application-load profile, on fresh caches: an ext4 filesystem on every target (`mkfs.ext4`, inode tables and journal initialised at once), "+
			"ssdcache-bench's tree laid out (`-prepare-only`; bcache switched to writearound meanwhile, since in writethrough it would cache the layout's writes; dm-cache in writethrough promotes no written block), "+
			"the page cache dropped, then %d runs each reading every file once with O_DIRECT.\n", o.treeWorkingSet, o.runs)
	}
	b.WriteString("- bcache has no dm-cache counters: its hit ratio is the share of the bytes read that the HDD did not serve (block layer), its promotions show as `-`.\n")
	b.WriteString("- Raw NVMe / raw HDD ratio measured in this run (median MB/s):\n\n")
	b.WriteString("| working set | test | NVMe / HDD |\n|---|---|---|\n")
	for _, ref := range r.References {
		if ref.SSDMBps != nil && ref.HDDMBps != nil && *ref.HDDMBps > 0 {
			fmt.Fprintf(&b, "| %s | %s | %.1f |\n", ref.WorkingSet, ref.Test, *ref.SSDMBps / *ref.HDDMBps)
		}
	}
	return b.String()
}

// summary is report.md's summary and overhead sections, for the terminal.
func summary(md string) string {
	var keep []string
	on := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "## ") {
			on = strings.HasPrefix(line, "## Summary") || strings.HasPrefix(line, "## Overhead") || strings.HasPrefix(line, "## References") ||
				strings.HasPrefix(line, "## Run 1 after restage") || strings.HasPrefix(line, "## Application load")
		}
		if on {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
