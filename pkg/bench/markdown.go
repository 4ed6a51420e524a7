package bench

import (
	"fmt"
	"io"
	"strings"
)

// WriteMarkdown renders the report as Markdown tables for people.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	writeHeader(&b, r)
	writeCacheAtStart(&b, r)
	writeScattered(&b, r)
	writeSummary(&b, r)
	writeLoadTimes(&b, r)
	writeWarmth(&b, r)
	writeReferences(&b, r)
	writeOverhead(&b, r)
	writeRuns(&b, r)
	writeDisks(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHeader(b *strings.Builder, r *Report) {
	c := r.Config
	fmt.Fprintf(b, "# ssdcache-bench report\n\n")
	if r.Error != "" {
		fmt.Fprintf(b, "**Stopped early:** %s\n\n", r.Error)
	}
	fmt.Fprintf(b, "- ssdcache-bench %s, %s, %s to %s (%s)\n", orDash(r.Version), orDash(r.FioVersion), r.StartedAt.Format("2006-01-02 15:04:05Z"),
		r.FinishedAt.Format("15:04:05Z"), r.FinishedAt.Sub(r.StartedAt).Round(1e9))
	fmt.Fprintf(b, "- %d runs per working set, %s pause between runs, %s pause after each test of a target other than the references, random seed %d, read-only %t\n",
		c.Runs, c.Interval, c.TestInterval, c.RandSeed, c.ReadOnly)
	fmt.Fprintf(b, "- per-test limits: runtime %s, I/O %s (0: one full pass over the working set)\n",
		c.RuntimeLimit, mib(c.IOLimit))
	if c.SSDReference != "" {
		fmt.Fprintf(b, "- converged: first run at or above %.0f%% of the raw SSD's median read MB/s (%s)\n",
			c.ConvergeFraction*100, c.SSDReference)
	}
	if n, least, most := PartialPasses(r); n > 0 {
		fmt.Fprintf(b, "- **%d of %d tests covered only part of their working set** (%.0f%% to %.0f%% of it: the runtime or I/O limit above cut them short); "+
			"their passes are counted by the bytes they covered (column \"of set\"), and a cache warmed by them holds only that part; runtime 0 reads whole passes\n",
			n, len(r.Results), least*100, most*100)
	}
	if short := shortTests(r.Results); short > 0 {
		fmt.Fprintf(b, "- **%d of %d tests ran under 1 s**: fio measures in milliseconds, so their figures are coarse; use larger working sets\n", short, len(r.Results))
	}
	b.WriteString("\n| target | path | dm-cache device | role |\n|---|---|---|---|\n")
	for _, t := range c.Targets {
		fmt.Fprintf(b, "| %s | `%s` | %s | %s |\n", t.Name, t.Path, orDash(t.DMDevice), role(c, t.Name))
	}
	b.WriteString("\n| working set | size | offset |\n|---|---|---|\n")
	for _, ws := range c.WorkingSets {
		fmt.Fprintf(b, "| %s | %s | %s |\n", ws.Label, mib(ws.Bytes), mib(ws.OffsetBytes))
	}
	b.WriteString("\n")
}

// writeCacheAtStart says, before any figure, whether each working set began
// on a fresh cache: a cache that earlier working sets filled makes a larger
// set look warm sooner, or evicts sooner, than it would alone.
func writeCacheAtStart(b *strings.Builder, r *Report) {
	var rows []string
	for _, ws := range r.Config.WorkingSets {
		for _, cs := range ws.CacheAtStart {
			rows = append(rows, fmt.Sprintf("| %s | %s | `%s` | %s |\n", ws.Label, cs.Target, cs.Path, cacheStartCell(cs)))
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Cache at the start of each working set\n\n| working set | target | path | cache |\n|---|---|---|---|\n")
	b.WriteString(strings.Join(rows, ""))
	b.WriteString("\n")
}

func cacheStartCell(cs CacheStart) string {
	switch {
	case cs.Fresh():
		return "fresh: its own volume, laid out by this run"
	case len(cs.After) > 0:
		return "**not fresh**: the same volume served working sets " + strings.Join(cs.After, ", ") + " before, and its cache was not reset"
	case cs.OwnPath:
		return "its own volume, but its file was there before this run: the cache may hold it from an earlier run"
	case cs.LaidOut:
		return "first on this volume, laid out by this run; the later working sets on it start with the cache this one leaves"
	}
	return "first on this volume, whose file was there before this run; the later working sets on it start with the cache this one leaves"
}

func shortTests(results []Result) int {
	n := 0
	for _, res := range results {
		if res.RuntimeMs < 1000 {
			n++
		}
	}
	return n
}

func role(c Config, name string) string {
	switch name {
	case c.SSDReference:
		return "SSD reference"
	case c.HDDReference:
		return "HDD reference"
	}
	return "measured"
}

func writeSummary(b *strings.Builder, r *Report) {
	reads := readTests(r.Config)
	if r.Config.SSDReference == "" {
		writeSpeedup(b, r)
		return
	}
	b.WriteString("## Summary: runs to converge\n\n")
	if len(r.Convergence) == 0 {
		b.WriteString("No convergence: it needs read tests (-tests read or all).\n\n")
		return
	}
	b.WriteString("Each cell: the first run reaching the threshold, and the last run's fraction of raw SSD MB/s.\n\n")
	b.WriteString("| working set | target |")
	for _, t := range reads {
		b.WriteString(" " + t.Label + " |")
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(reads)) + "\n")
	for _, ws := range r.Config.WorkingSets {
		for _, t := range r.Config.Targets {
			if t.Name == r.Config.SSDReference {
				continue
			}
			fmt.Fprintf(b, "| %s | %s |", ws.Label, t.Name)
			for _, test := range reads {
				b.WriteString(" " + convergenceCell(r, ws.Label, t.Name, test.ID) + " |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
}

// writeLoadTimes shows the tree test as the application's user sees it: the
// seconds each run took to read the whole tree, and the times against the
// raw disks'.
func writeLoadTimes(b *strings.Builder, r *Report) {
	if !r.Config.tree() {
		return
	}
	c := r.Config
	b.WriteString("## Application load: seconds to read the tree\n\n")
	b.WriteString("Every file of the tree read once per run, in path order, with O_DIRECT; run 1 also reads the directories and inodes from the disks, later runs find them in memory. " +
		"Last run ÷ raw SSD: over the raw SSD's median run; run 1 ÷ raw HDD: over the raw HDD's run 1, as cold as it.\n\n| working set | target | files |")
	for run := 1; run <= c.Runs; run++ {
		fmt.Fprintf(b, " run %d |", run)
	}
	b.WriteString(" last run ÷ raw SSD | run 1 ÷ raw HDD |\n|---|---|---|" + strings.Repeat("---|", c.Runs+2) + "\n")
	for _, ws := range c.WorkingSets {
		ssd, hdd := loadSeconds(resultsOf(r, ws.Label, c.SSDReference, TreeTest.ID)), loadSeconds(resultsOf(r, ws.Label, c.HDDReference, TreeTest.ID))
		ssdMedian, hddRun1 := 0.0, 0.0
		if len(ssd) > 0 {
			ssdMedian = Median(ssd)
		}
		if len(hdd) > 0 {
			hddRun1 = hdd[0]
		}
		for _, t := range c.Targets {
			runs := resultsOf(r, ws.Label, t.Name, TreeTest.ID)
			if len(runs) == 0 {
				continue
			}
			secs := loadSeconds(runs)
			fmt.Fprintf(b, "| %s | %s | %d |", ws.Label, t.Name, runs[0].Files)
			for run := 0; run < c.Runs; run++ {
				cell := "-"
				if run < len(secs) {
					cell = fmt.Sprintf("%.2f s", secs[run])
				}
				b.WriteString(" " + cell + " |")
			}
			fmt.Fprintf(b, " %s | %s |\n", timeRatio(secs[len(secs)-1], ssdMedian), timeRatio(secs[0], hddRun1))
		}
	}
	b.WriteString("\n")
}

// resultsOf are the results of one test on one target and working set, in
// run order.
func resultsOf(r *Report, ws, target, test string) []Result {
	var out []Result
	for _, res := range r.Results {
		if res.WorkingSet == ws && res.Target == target && res.Test == test {
			out = append(out, res)
		}
	}
	return out
}

// loadSeconds are the tree-read times of runs.
func loadSeconds(runs []Result) []float64 {
	secs := make([]float64, len(runs))
	for i, res := range runs {
		secs[i] = float64(res.RuntimeMs) / 1000
	}
	return secs
}

// timeRatio is secs over the reference's time, "-" without one.
func timeRatio(secs, ref float64) string {
	if ref <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", secs/ref)
}

func convergenceCell(r *Report, ws, target, test string) string {
	for _, c := range r.Convergence {
		if c.WorkingSet != ws || c.Target != target || c.Test != test {
			continue
		}
		last := "last " + fmtFrac(c.LastFractionOfSSD)
		if c.RunsToConverge == nil {
			return "not converged (" + last + ")"
		}
		return fmt.Sprintf("run %d (%s)", *c.RunsToConverge, last)
	}
	return "-"
}

func readTests(c Config) []Test {
	var out []Test
	for _, t := range c.Tests {
		if t.Direction == Read {
			out = append(out, t)
		}
	}
	return out
}

func writeReferences(b *strings.Builder, r *Report) {
	if len(r.References) == 0 {
		return
	}
	b.WriteString("## References (median over runs)\n\n")
	b.WriteString("| working set | test | raw SSD MB/s | raw HDD MB/s | raw SSD p50 us | raw HDD p50 us |\n|---|---|---|---|---|---|\n")
	for _, ref := range r.References {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", ref.WorkingSet, label(ref.Test),
			fmtNum(ref.SSDMBps, 1), fmtNum(ref.HDDMBps, 1), fmtNum(ref.SSDLatP50, 0), fmtNum(ref.HDDLatP50, 0))
	}
	b.WriteString("\n")
}

func writeOverhead(b *strings.Builder, r *Report) {
	if len(r.Overhead) == 0 {
		return
	}
	b.WriteString("## Overhead of the caching layer\n\n")
	b.WriteString("cache-hit: last run against the raw SSD; cold-miss: run 1 against the raw HDD. Ratios: 1.00 is no overhead; the hit ratio shows whether the run really hit.\n\n")
	b.WriteString("| working set | target | kind | test | run | against | MB/s ratio | p50 latency ratio | hit ratio |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range r.Overhead {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %s | %.2f | %.2f | %s |\n", o.WorkingSet, o.Target, o.Kind,
			label(o.Test), o.Run, o.Reference, o.ThroughputRatio, o.LatencyP50Ratio, fmtFrac(o.HitRatio))
	}
	b.WriteString("\n")
}

func writeRuns(b *strings.Builder, r *Report) {
	for _, ws := range r.Config.WorkingSets {
		for _, t := range r.Config.Targets {
			fmt.Fprintf(b, "## Runs: working set %s, %s\n\n", ws.Label, t.Name)
			b.WriteString("| run | pass | test | MB/s | IOPS | p50 us | p99 us | MiB | of set | of SSD | of HDD | of warm ceiling | hit ratio | promotions | demotions |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, res := range r.Results {
				if res.WorkingSet != ws.Label || res.Target != t.Name {
					continue
				}
				prom, dem := "-", "-"
				if res.Counters != nil {
					prom, dem = fmt.Sprint(res.Counters.Promotions), fmt.Sprint(res.Counters.Demotions)
				}
				fmt.Fprintf(b, "| %d | %s | %s | %.1f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", res.Run, passCell(res.Pass), label(res.Test),
					res.MBps, res.IOPS, res.LatP50us, res.LatP99us, float64(res.IOBytes)/(1<<20), fmtFrac(res.FractionOfWorkingSet), fmtFrac(res.FractionOfSSD), fmtFrac(res.FractionOfHDD),
					fmtFrac(res.FractionOfCeiling), fmtFrac(res.HitRatio), prom, dem)
			}
			b.WriteString("\n")
		}
	}
}

// writeWarmth counts warm-up in passes over the working set: each read
// test of each run is one pass.
func writeWarmth(b *strings.Builder, r *Report) {
	if len(r.Warmth) == 0 {
		return
	}
	b.WriteString("## Warm-up, counted in passes over the working set\n\n")
	fmt.Fprintf(b, "Every read test of every run is one pass over the working set (a test cut short by the runtime limit counts for what it read). "+
		"Warm: read hit ratio of at least %.2f and MB/s of at least %.2f of the warm ceiling, the median MB/s of the same target's runs of the test whose hit ratio was at least %.2f. "+
		"Pass 1 against the raw HDD shows what the cache costs a cold read: against the raw HDD's median, and against its own first run, "+
		"which like pass 1 is the first read of the data laid out for the working set.\n\n", warmFraction, warmFraction, fullyWarmHitRatio)
	b.WriteString("| working set | target | test | warm ceiling MB/s | warm at pass | pass 1 of raw HDD | pass 1 of raw HDD's run 1 |\n|---|---|---|---|---|---|---|\n")
	for _, w := range r.Warmth {
		warmAt := "not warm"
		if w.PassToWarm != nil {
			warmAt = fmt.Sprint(*w.PassToWarm)
		}
		if w.CeilingMBps == nil {
			warmAt = "no fully warm run"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", w.WorkingSet, w.Target, label(w.Test), fmtNum(w.CeilingMBps, 1), warmAt,
			fmtFrac(w.FirstPassOfHDD), fmtFrac(w.FirstPassOfHDDFirst))
	}
	b.WriteString("\n")
}

func passCell(pass int) string {
	if pass == 0 {
		return "-"
	}
	return fmt.Sprint(pass)
}

func label(testID string) string {
	for _, t := range Matrix() {
		if t.ID == testID {
			return t.Label
		}
	}
	return testID
}

func fmtFrac(f *float64) string { return fmtNum(f, 2) }

func fmtNum(f *float64, decimals int) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, *f)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mib(bytes int64) string {
	if bytes == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f MiB", float64(bytes)/(1<<20))
}

// writeDisks shows, per run, how busy each device under a target was: a
// cache that warms moves the reads from the HDD (its utilisation falls) to
// the SSD.
func writeDisks(b *strings.Builder, r *Report) {
	if len(r.Disks) == 0 {
		return
	}
	b.WriteString("## Disks under each target\n\n")
	b.WriteString("iostat's figures over each test: utilisation (%util), MB/s read and written, requests per second, average wait per request and average queue size (aqu-sz).\n\n")
	b.WriteString("| target | disk | role | rotational | model |\n|---|---|---|---|---|\n")
	for _, td := range r.Disks {
		for _, d := range td.Disks {
			fmt.Fprintf(b, "| %s | %s | %s | %t | %s |\n", td.Target, d.Name, d.Role, d.Rotational, orDash(d.Model))
		}
	}
	b.WriteString("\n")
	for _, ws := range r.Config.WorkingSets {
		for _, td := range r.Disks {
			fmt.Fprintf(b, "### Disks: working set %s, %s\n\n", ws.Label, td.Target)
			b.WriteString("| run | test | disk | util | read MB/s | write MB/s | IOPS | await ms | aqu-sz |\n|---|---|---|---|---|---|---|---|---|\n")
			for _, res := range r.Results {
				if res.WorkingSet != ws.Label || res.Target != td.Target {
					continue
				}
				for _, d := range res.Disks {
					fmt.Fprintf(b, "| %d | %s | %s | %.0f%% | %.1f | %.1f | %.0f | %.2f | %.2f |\n", res.Run, label(res.Test), d.Disk,
						d.Utilization*100, d.ReadMBps, d.WriteMBps, d.ReadIOPS+d.WriteIOPS, d.AwaitMs, d.QueueDepth)
				}
			}
			b.WriteString("\n")
		}
	}
}
