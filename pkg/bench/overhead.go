package bench

// Overhead rows compare the queue-depth-1 tests, where an interposed block
// layer's per-command cost shows (deep queues hide it).
var (
	cacheHitTests = []string{"seq1m-q1t1-read", "rnd4k-q1t1-read"}
	coldMissTests = []string{"seq1m-q1t1-read", "rnd4k-q1t1-read", "seq1m-q1t1-write", "rnd4k-q1t1-write"}
)

// overhead compares each cached (non-reference) target's last run with the
// raw SSD (cache hits) and its first run with the raw HDD (cold misses).
// The hit ratio of the compared run is kept so a reader can check that a
// "cache-hit" run did hit.
func overhead(r *Report, refs refTable) []Overhead {
	cfg := r.Config
	var out []Overhead
	for _, ws := range cfg.WorkingSets {
		for _, t := range cfg.Targets {
			if t.Name == cfg.SSDReference || t.Name == cfg.HDDReference {
				continue
			}
			if cfg.SSDReference != "" {
				out = append(out, overheadRows(r, ws.Label, t.Name, CacheHit, cfg.Runs, cacheHitTests, cfg.SSDReference, refs.ssd, refs.ssdLat)...)
			}
			if cfg.HDDReference != "" {
				out = append(out, overheadRows(r, ws.Label, t.Name, ColdMiss, 1, coldMissTests, cfg.HDDReference, refs.hdd, refs.hddLat)...)
			}
		}
	}
	return out
}

func overheadRows(r *Report, ws, target string, kind OverheadKind, run int, tests []string, ref string, mbps, lat map[refKey]*float64) []Overhead {
	var out []Overhead
	for _, test := range tests {
		res, ok := findResult(r.Results, ws, target, run, test)
		k := refKey{ws, test}
		if !ok || mbps[k] == nil || lat[k] == nil || *mbps[k] <= 0 || *lat[k] <= 0 {
			continue
		}
		out = append(out, Overhead{
			WorkingSet: ws, Target: target, Kind: kind, Test: test, Run: run, Reference: ref,
			ThroughputRatio: res.MBps / *mbps[k],
			LatencyP50Ratio: res.LatP50us / *lat[k],
			HitRatio:        res.HitRatio,
		})
	}
	return out
}

func findResult(results []Result, ws, target string, run int, test string) (Result, bool) {
	for _, res := range results {
		if res.WorkingSet == ws && res.Target == target && res.Run == run && res.Test == test {
			return res, true
		}
	}
	return Result{}, false
}
