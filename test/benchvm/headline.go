package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/dashboard/scrapelog"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// Warm is the counters' verdict on one pass, which emulation cannot blur:
// at least this read hit ratio by the cache's own counters (bcache: the
// bytes its HDD did not serve) ...
const warmHitRatio = 0.9

// ... and less than this share of the working set read from the HDD during
// the pass (block layer: misses and any copy the cache made meanwhile).
const warmHDDShare = 0.1

// headline is report.md's first section: for each cold working set and
// cache, the first run that was warm by the counters, what each run read
// from the HDD, and ssdcache's promotion figures from its node's log and
// metrics. It answers "when do reads come from the SSD?" before any table
// of MB/s does.
func headline(r *bench.Report, o options) string {
	test := strings.Split(o.readTests, ",")[0]
	var b strings.Builder
	fmt.Fprintf(&b, "## Headline: the run at which each cache is warm (%s)\n\n", test)
	fmt.Fprintf(&b, "Warm: read hit ratio at least %.1f and HDD bytes read during the pass under %.0f %% of the working set. "+
		"HDD bytes are the block layer's count of the HDD under the target over the pass, so they include a cache's own copies made meanwhile; "+
		"x WS is that count over the working set. Pass 1 x raw HDD is run 1's MB/s over the raw HDD's run 1 (same disk, same run).\n\n",
		warmHitRatio, 100*warmHDDShare)
	b.WriteString("| working set | target | warm at run | pass 1 x raw HDD | HDD bytes per run (x WS) | hit ratio per run |\n|---|---|---|---|---|---|\n")
	for _, ws := range o.workingSets {
		set, ok := workingSet(r, ws)
		if !ok {
			continue
		}
		for _, target := range cachedTargets(r) {
			writeHeadlineRow(&b, r, set, target, test)
		}
	}
	b.WriteString("\n")
	writePromotions(&b, o)
	return b.String()
}

// withHeadline puts the headline under report.md's title, so its first
// screen has the answer.
func withHeadline(md, headline string) string {
	title, rest, _ := strings.Cut(md, "\n\n")
	return title + "\n\n" + headline + rest
}

func writeHeadlineRow(b *strings.Builder, r *bench.Report, set bench.WorkingSet, target, test string) {
	warmAt := "not within the runs"
	var bytesRead, hits []string
	runs := resultsByRun(r, set.Label, target, test)
	for i, res := range runs {
		read, haveRead := bench.HDDReadBytes(r, res)
		bytesRead = append(bytesRead, orUnknown(haveRead, fmt.Sprintf("%.2f", float64(read)/float64(set.Bytes))))
		hits = append(hits, num(res.HitRatio))
		if warmAt == "not within the runs" && haveRead && res.HitRatio != nil &&
			*res.HitRatio >= warmHitRatio && float64(read) < warmHDDShare*float64(set.Bytes) {
			warmAt = fmt.Sprintf("**%d**", i+1)
		}
	}
	pass1 := "-"
	if hddRuns := resultsByRun(r, set.Label, r.Config.HDDReference, test); len(runs) > 0 && len(hddRuns) > 0 && hddRuns[0].MBps > 0 {
		pass1 = fmt.Sprintf("%.2f", runs[0].MBps/hddRuns[0].MBps)
	}
	fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", set.Label, target, warmAt, pass1, strings.Join(bytesRead, " "), strings.Join(hits, " "))
}

func workingSet(r *bench.Report, label string) (bench.WorkingSet, bool) {
	for _, ws := range r.Config.WorkingSets {
		if ws.Label == label {
			return ws, true
		}
	}
	return bench.WorkingSet{}, false
}

// cachedTargets are the targets other than the references, in the report's order.
func cachedTargets(r *bench.Report) []string {
	var names []string
	for _, t := range r.Config.Targets {
		if t.Name != r.Config.SSDReference && t.Name != r.Config.HDDReference {
			names = append(names, t.Name)
		}
	}
	return names
}

// resultsByRun are one target's results of one test, index run-1.
func resultsByRun(r *bench.Report, set, target, test string) []bench.Result {
	var runs []bench.Result
	for _, res := range r.Results {
		if res.WorkingSet == set && res.Target == target && res.Test == test && res.Run == len(runs)+1 {
			runs = append(runs, res)
		}
	}
	return runs
}

func orUnknown(known bool, s string) string {
	if !known {
		return "?"
	}
	return s
}

// promotionFigures are ssdcache's copies into the cache during one cold part.
type promotionFigures struct {
	batches          int
	blocks           int64
	longestUncached  time.Duration // longest time the volume read from the HDD only (a swap to linear)
	longestSuspended time.Duration // longest time its I/O waited for a table load (a metadata swap)
	peakRSS          float64       // ssdcache-node's peak resident memory, bytes
}

// writePromotions is ssdcache's side of the headline: what its batches
// copied against the working set, what its origin read in all, the longest
// uncached window and the node plugin's peak memory, per cold working set.
func writePromotions(b *strings.Builder, o options) {
	dir := filepath.Join(o.outputDir, "parts")
	b.WriteString("ssdcache's promotions per working set (node log and metrics over the part's runs; origin: the block layer's count of the volume's origin LV, " +
		"which every pass's misses and every copy read; a cache that reads each byte once for the first pass and once more for its copy reads working set + promoted):\n\n")
	b.WriteString("| working set | batches | promoted x WS | origin read x (WS + promoted) | longest uncached window (HDD only) | longest suspended (I/O waits) | node plugin peak RSS |\n|---|---|---|---|---|---|---|\n")
	for _, ws := range o.workingSets {
		partDir := filepath.Join(dir, parts.WorkingSet(ws))
		rep, err := parts.ReadReport(partDir)
		if err != nil || len(rep.Config.WorkingSets) == 0 {
			continue
		}
		origin, ok, err := parts.ReadOrigin(partDir)
		if err != nil || !ok || origin.BlockBytes == 0 {
			fmt.Fprintf(b, "| %s | no origin figures recorded | | | | | |\n", ws)
			continue
		}
		p := promotionsDuring(filepath.Join(dir, "ssdcache-node.log"), filepath.Join(dir, parts.MetricsLog), rep.StartedAt, rep.FinishedAt)
		setBytes := float64(rep.Config.WorkingSets[0].Bytes)
		promoted := float64(p.blocks * origin.BlockBytes)
		fmt.Fprintf(b, "| %s | %d | %.2f | %.2f | %s | %s | %s |\n", ws, p.batches, promoted/setBytes,
			float64(origin.ReadBytes)/(setBytes+promoted), p.longestUncached.Round(time.Millisecond), p.longestSuspended.Round(time.Millisecond), mib(p.peakRSS))
	}
	b.WriteString("\n")
}

func mib(bytes float64) string {
	if bytes == 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", bytes/(1<<20))
}

// promotedLine is the promoter's log line of one batch (pkg/agent/promoter.go);
// logs before the metadata swap have no suspended field.
var promotedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d+)\s.*"Promoted the blocks read" .* promoted=(\d+) .* uncached="([^"]+)"(?: suspended="([^"]+)")?`)

// promotionsDuring reads the batches the node logged and its peak memory
// between from and to; a log it cannot read gives zeros, which the table
// shows as such.
func promotionsDuring(nodeLog, metricsLog string, from, to time.Time) promotionFigures {
	var p promotionFigures
	if data, err := os.ReadFile(nodeLog); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			m := promotedLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			at, err := time.Parse("0102 15:04:05.999999", m[1])
			if err != nil {
				continue
			}
			at = at.AddDate(from.Year(), 0, 0)
			blocks, _ := strconv.ParseInt(m[2], 10, 64)
			uncached, _ := time.ParseDuration(m[3])
			suspended, _ := time.ParseDuration(m[4])
			if at.Before(from) || at.After(to) || blocks == 0 {
				continue
			}
			p.batches++
			p.blocks += blocks
			p.longestUncached = max(p.longestUncached, uncached)
			p.longestSuspended = max(p.longestSuspended, suspended)
		}
	}
	p.peakRSS = peakRSS(metricsLog, from, to)
	return p
}

// peakRSS is the largest process_resident_memory_bytes the node exported
// between from and to.
func peakRSS(metricsLog string, from, to time.Time) float64 {
	data, err := os.ReadFile(metricsLog)
	if err != nil {
		return 0
	}
	var peak float64
	inWindow := false
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		line := s.Text()
		if rest, ok := strings.CutPrefix(line, scrapelog.Marker); ok {
			stamp, _, _ := strings.Cut(rest, " ")
			ms, err := strconv.ParseInt(stamp, 10, 64)
			at := time.UnixMilli(ms)
			inWindow = err == nil && !at.Before(from) && !at.After(to)
			continue
		}
		if value, ok := strings.CutPrefix(line, "process_resident_memory_bytes "); ok && inWindow {
			if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
				peak = max(peak, v)
			}
		}
	}
	return peak
}
