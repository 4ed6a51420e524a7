package main

import (
	"fmt"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// restagedLabel ends the label of a working set measured after its caches
// were restaged; the rest of the label names its cold working set.
const restagedLabel = " restaged"

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

func restagedRows(r *bench.Report) []restagedRow {
	ceiling := map[resultKey]*float64{}
	for _, w := range r.Warmth {
		ceiling[resultKey{w.WorkingSet, w.Target, w.Test}] = w.CeilingMBps
	}
	coldRun1 := map[resultKey]float64{}
	for _, res := range r.Results {
		if res.Run == 1 {
			coldRun1[resultKey{res.WorkingSet, res.Target, res.Test}] = res.MBps
		}
	}
	var rows []restagedRow
	for _, res := range r.Results {
		cold, restaged := strings.CutSuffix(res.WorkingSet, restagedLabel)
		isReference := res.Target == r.Config.SSDReference || res.Target == r.Config.HDDReference
		if !restaged || isReference || res.Run != 1 || res.Pass == 0 {
			continue
		}
		k := resultKey{cold, res.Target, res.Test}
		row := restagedRow{workingSet: res.WorkingSet, target: res.Target, test: res.Test,
			hitRatio: res.HitRatio, mbps: res.MBps, ofSSD: res.FractionOfSSD}
		row.ofCeiling = ratio(res.MBps, ceiling[k])
		if run1, ok := coldRun1[k]; ok {
			row.ofColdRun1 = ratio(res.MBps, &run1)
		}
		rows = append(rows, row)
	}
	return rows
}

func ratio(mbps float64, of *float64) *float64 {
	if of == nil || *of <= 0 {
		return nil
	}
	f := mbps / *of
	return &f
}

// restagedSection is report.md's account of the restage step.
func restagedSection(r *bench.Report) string {
	rows := restagedRows(r)
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Run 1 after restage\n\n")
	b.WriteString("After each working set's cold runs every cache was taken down and brought up again, as a node does when a volume's pod is replaced: " +
		"ssdcache through CSI (NodeUnpublishVolume, NodeUnstageVolume, NodeStageVolume, NodePublishVolume: the hot set saved at unstage, the new cache filled from it at stage), " +
		"lvmcache with `lvchange -an` and `-ay`, bcache by stopping its device and registering the backing device again. Then every target ran once more. " +
		"Warm ceiling: the cold runs' median MB/s at a read hit ratio of 0.95 or more (`-` where none was that warm, or no dm-cache counters).\n\n")
	b.WriteString("| working set | target | test | hit ratio | MB/s | of warm ceiling | of raw SSD | x cold run 1 |\n|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %s | %s | %s |\n", row.workingSet, row.target, row.test,
			num(row.hitRatio), row.mbps, num(row.ofCeiling), num(row.ofSSD), num(row.ofColdRun1))
	}
	return b.String()
}

func num(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *f)
}
