package bench

import (
	"fmt"
	"strings"
)

// writeSpeedup leads a report without an SSD reference (the in-cluster Job
// sees only its volume): each run's read MB/s against run 1, and what the
// cache did in that run, so the convergence shows without a raw device.
func writeSpeedup(b *strings.Builder, r *Report) {
	reads := readTests(r.Config)
	b.WriteString("## Summary: speedup over run 1\n\n")
	if len(reads) == 0 {
		b.WriteString("No speedup: it needs read tests (-tests read or all).\n\n")
		return
	}
	b.WriteString("Without an SSD reference the runs are compared with run 1, the cold cache. " +
		"Each cell: MB/s and, in brackets, that run's MB/s over run 1's. Hit ratio and promotions " +
		"are dm-cache's read counters summed over the run's read tests.\n\n")
	for _, ws := range r.Config.WorkingSets {
		for _, t := range r.Config.Targets {
			writeSpeedupTable(b, r, ws, t, reads)
		}
	}
}

func writeSpeedupTable(b *strings.Builder, r *Report, ws WorkingSet, t Target, reads []Test) {
	byKey := map[string]Result{}
	for _, res := range r.Results {
		if res.WorkingSet == ws.Label && res.Target == t.Name {
			byKey[fmt.Sprint(res.Run, res.Test)] = res
		}
	}
	if len(byKey) == 0 {
		return
	}
	fmt.Fprintf(b, "### Working set %s, %s\n\n", workingSetName(ws), t.Name)
	if line := speedupHeadline(r, byKey, reads); line != "" {
		b.WriteString(line + "\n\n")
	}
	b.WriteString("| run |")
	for _, test := range reads {
		b.WriteString(" " + test.Label + " MB/s |")
	}
	b.WriteString(" read hit ratio | promotions |\n|---|" + strings.Repeat("---|", len(reads)+2) + "\n")
	for run := 1; run <= r.Config.Runs; run++ {
		fmt.Fprintf(b, "| %d |", run)
		for _, test := range reads {
			b.WriteString(" " + speedupCell(byKey, run, test.ID) + " |")
		}
		hit, prom := runCounters(byKey, run, reads)
		b.WriteString(" " + hit + " | " + prom + " |\n")
	}
	b.WriteString("\n")
}

// speedupHeadline sums up the last measured run of the plotted test.
func speedupHeadline(r *Report, byKey map[string]Result, reads []Test) string {
	for run := r.Config.Runs; run > 1; run-- {
		last, ok := byKey[fmt.Sprint(run, r.Config.PlotTest)]
		first, okFirst := byKey[fmt.Sprint(1, r.Config.PlotTest)]
		if !ok || !okFirst || first.MBps <= 0 {
			continue
		}
		head := fmt.Sprintf("**Run %d: %.2f× run 1** on %s (%.1f against %.1f MB/s)",
			run, last.MBps/first.MBps, label(r.Config.PlotTest), last.MBps, first.MBps)
		hit, prom := runCounters(byKey, run, reads)
		if prom == "-" {
			// The chart's Job has no dm-cache device to sample.
			return head + "; no dm-cache counters (-dm-cache): the binding's hit ratio is in `kubectl get cachebindings`."
		}
		return fmt.Sprintf("%s; read hit ratio %s, %s promotions in run %d.", head, hit, prom, run)
	}
	return ""
}

func speedupCell(byKey map[string]Result, run int, test string) string {
	res, ok := byKey[fmt.Sprint(run, test)]
	if !ok {
		return "-"
	}
	first, ok := byKey[fmt.Sprint(1, test)]
	if !ok || first.MBps <= 0 {
		return fmt.Sprintf("%.1f", res.MBps)
	}
	return fmt.Sprintf("%.1f (%.2f×)", res.MBps, res.MBps/first.MBps)
}

// runCounters is one run's read hit ratio (its read tests' hit ratios
// weighted by the bytes each read) and the promotions dm-cache counted in
// them; "-" for what the target lacks (no disks or -dm-cache device).
func runCounters(byKey map[string]Result, run int, reads []Test) (hitRatio, promotions string) {
	var hitBytes, bytes float64
	var promoted uint64
	counted := false
	for _, test := range reads {
		res, ok := byKey[fmt.Sprint(run, test.ID)]
		if !ok {
			continue
		}
		if res.HitRatio != nil && res.IOBytes > 0 {
			hitBytes += *res.HitRatio * float64(res.IOBytes)
			bytes += float64(res.IOBytes)
		}
		if res.Counters != nil {
			promoted += res.Counters.Promotions
			counted = true
		}
	}
	hitRatio, promotions = "-", "-"
	if bytes > 0 {
		hitRatio = fmt.Sprintf("%.2f", hitBytes/bytes)
	}
	if counted {
		promotions = fmt.Sprint(promoted)
	}
	return hitRatio, promotions
}
