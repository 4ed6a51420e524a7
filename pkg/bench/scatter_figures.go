package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Scattered are one target's figures in the scattered test over one
// working set, all from counters (fio's I/O log, the cache's hit counters,
// the block layer's count of the HDD), none from MB/s.
type Scattered struct {
	WorkingSet string `json:"workingSet"`
	Target     string `json:"target"`
	Test       string `json:"test"`
	// HotBytes is the hot set: every zone's hot part.
	HotBytes        int64 `json:"hotBytes"`
	Zones           int   `json:"zones"`
	ZoneStrideBytes int64 `json:"zoneStrideBytes"`
	// TouchedBytes and TouchedBlockBytes are the distinct 4 KiB blocks and
	// cache blocks (BlockBytes) the runs read, over all runs.
	TouchedBytes      int64 `json:"touchedBytes"`
	TouchedBlockBytes int64 `json:"touchedBlockBytes"`
	BlockBytes        int64 `json:"blockBytes"`
	// ReadsOutsideHot counts reads that fell outside the hot zones (0
	// unless fio's distribution misbehaved).
	ReadsOutsideHot int64          `json:"readsOutsideHot"`
	Runs            []ScatteredRun `json:"runs"`
	// PromotedBytes are the bytes the cache copied in over the runs, where
	// the caller knows them (ssdcache: its node's log, SetPromoted).
	PromotedBytes       *int64   `json:"promotedBytes,omitempty"`
	PromotedOverHot     *float64 `json:"promotedOverHot,omitempty"`
	PromotedOverTouched *float64 `json:"promotedOverTouched,omitempty"`
}

// ScatteredRun is one run's counters.
type ScatteredRun struct {
	Run int `json:"run"`
	// HitRatio is the result's read hit ratio; every read is 4 KiB, so it is
	// the hit ratio by bytes as well as by reads.
	HitRatio *float64 `json:"hitRatio,omitempty"`
	// HDDReadBytes is what the rotational disks below read during the test,
	// a cache's own copies included.
	HDDReadBytes *int64 `json:"hddReadBytes,omitempty"`
	// HDDOverRawHDD is HDDReadBytes over the raw HDD's in the same run
	// (which read as many 4 KiB blocks over its own zones).
	HDDOverRawHDD *float64 `json:"hddOverRawHDD,omitempty"`
	// MBpsOverRawHDD and MBpsOverRawSSD compare with the references' same run.
	MBpsOverRawHDD *float64 `json:"mbpsOverRawHDD,omitempty"`
	MBpsOverRawSSD *float64 `json:"mbpsOverRawSSD,omitempty"`
}

// scattered derives the figures of every result with a Scatter, keeping
// the promoted bytes earlier set on the same working set and target.
func scattered(r *Report, earlier []Scattered) []Scattered {
	var out []Scattered
	for _, res := range r.Results {
		if res.Scatter == nil {
			continue
		}
		i := slices.IndexFunc(out, func(s Scattered) bool {
			return s.WorkingSet == res.WorkingSet && s.Target == res.Target && s.Test == res.Test
		})
		if i < 0 {
			p := res.Scatter
			out = append(out, Scattered{WorkingSet: res.WorkingSet, Target: res.Target, Test: res.Test, HotBytes: p.HotBytes(),
				Zones: p.Zones, ZoneStrideBytes: p.ZoneStrideBytes, BlockBytes: p.BlockBytes})
			i = len(out) - 1
		}
		s := &out[i]
		// Every run reads the same blocks (fixed seed), so the largest
		// run's set is the union; a run cut short reads fewer.
		s.TouchedBytes = max(s.TouchedBytes, res.Scatter.TouchedBytes)
		s.TouchedBlockBytes = max(s.TouchedBlockBytes, res.Scatter.TouchedBlockBytes)
		s.ReadsOutsideHot += res.Scatter.OutsideHot
		s.Runs = append(s.Runs, scatteredRun(r, res))
	}
	for i := range out {
		if j := slices.IndexFunc(earlier, func(e Scattered) bool {
			return e.WorkingSet == out[i].WorkingSet && e.Target == out[i].Target && e.Test == out[i].Test
		}); j >= 0 && earlier[j].PromotedBytes != nil {
			out[i].setPromoted(*earlier[j].PromotedBytes)
		}
	}
	return out
}

func scatteredRun(r *Report, res Result) ScatteredRun {
	run := ScatteredRun{Run: res.Run, HitRatio: res.HitRatio}
	hdd, ok := HDDReadBytes(r, res)
	if ok {
		run.HDDReadBytes = &hdd
	}
	if raw, found := sameRun(r, res, r.Config.HDDReference); found {
		if rawHDD, rawOK := HDDReadBytes(r, raw); ok && rawOK {
			run.HDDOverRawHDD = ratioOf(float64(hdd), float64(rawHDD))
		}
		run.MBpsOverRawHDD = ratioOf(res.MBps, raw.MBps)
	}
	if raw, found := sameRun(r, res, r.Config.SSDReference); found {
		run.MBpsOverRawSSD = ratioOf(res.MBps, raw.MBps)
	}
	return run
}

// sameRun is target's result of res's working set, run and test.
func sameRun(r *Report, res Result, target string) (Result, bool) {
	if target == "" {
		return Result{}, false
	}
	i := slices.IndexFunc(r.Results, func(o Result) bool {
		return o.WorkingSet == res.WorkingSet && o.Run == res.Run && o.Test == res.Test && o.Target == target
	})
	if i < 0 {
		return Result{}, false
	}
	return r.Results[i], true
}

// HDDReadBytes is what the rotational disks below res's target read during
// it; false without their figures.
func HDDReadBytes(r *Report, res Result) (int64, bool) {
	rotational := map[string]bool{}
	for _, td := range r.Disks {
		for _, d := range td.Disks {
			if td.Target == res.Target && d.Role == DiskBelow && d.Rotational {
				rotational[d.Name] = true
			}
		}
	}
	var sum int64
	found := false
	for _, f := range res.Disks {
		if rotational[f.Disk] {
			sum += f.ReadBytes
			found = true
		}
	}
	return sum, found
}

// SetPromoted records the bytes a target's cache copied in during a
// working set's scattered runs (known to the caller, not to fio: ssdcache's
// node logs its batches) and their ratios to the hot and touched bytes.
// False when the report has no such figures.
func (r *Report) SetPromoted(workingSet, target string, bytes int64) bool {
	found := false
	for i := range r.Scattered {
		if s := &r.Scattered[i]; s.WorkingSet == workingSet && s.Target == target {
			s.setPromoted(bytes)
			found = true
		}
	}
	return found
}

func (s *Scattered) setPromoted(bytes int64) {
	s.PromotedBytes = &bytes
	s.PromotedOverHot = ratioOf(float64(bytes), float64(s.HotBytes))
	s.PromotedOverTouched = ratioOf(float64(bytes), float64(s.TouchedBlockBytes))
}

// ratioOf is v over ref; nil when ref is not positive.
func ratioOf(v, ref float64) *float64 { return Fraction(v, &ref) }

// writeScattered is report.md's table of the scattered test: what each
// target's runs touched, hit and read from the HDD, and what its cache
// promoted against the hot and the touched bytes.
func writeScattered(b *strings.Builder, r *Report) {
	if len(r.Scattered) == 0 {
		return
	}
	b.WriteString("## Scattered reads: promoted against hot bytes\n\n")
	b.WriteString("4 KiB random reads spread evenly over the hot zones of each whole target; touched: the distinct 4 KiB blocks and cache blocks " +
		"fio's I/O log shows the runs read; hit ratio: the cache's counters (every read is 4 KiB, so by bytes as by reads; bcache: the bytes its HDD did not serve); " +
		"HDD: the block layer's count of the rotational disk below, per run, over the hot bytes and over the raw HDD's in the same run.\n\n")
	b.WriteString("| working set | target | zones x hot | touched 4 KiB | touched cache blocks | promoted x hot | promoted x touched | hit ratio per run | HDD bytes per run (x hot) | HDD x raw HDD per run |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Scattered {
		var hits, hdd, overRaw []string
		for _, run := range s.Runs {
			hits = append(hits, fmtRatio(run.HitRatio))
			hdd = append(hdd, "-")
			if run.HDDReadBytes != nil {
				hdd[len(hdd)-1] = fmt.Sprintf("%.3f", float64(*run.HDDReadBytes)/float64(s.HotBytes))
			}
			overRaw = append(overRaw, fmtRatio(run.HDDOverRawHDD))
		}
		fmt.Fprintf(b, "| %s | %s | %d x %s | %s (%.2f of hot) | %s of %s (%.2f of hot) | %s | %s | %s | %s | %s |\n",
			s.WorkingSet, s.Target, s.Zones, mib(s.HotBytes/int64(max(1, s.Zones))), mib(s.TouchedBytes), float64(s.TouchedBytes)/float64(s.HotBytes),
			mib(s.TouchedBlockBytes), fmt.Sprintf("%d KiB", s.BlockBytes>>10), float64(s.TouchedBlockBytes)/float64(s.HotBytes),
			fmtRatio(s.PromotedOverHot), fmtRatio(s.PromotedOverTouched), strings.Join(hits, " "), strings.Join(hdd, " "), strings.Join(overRaw, " "))
	}
	b.WriteString("\n")
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}
