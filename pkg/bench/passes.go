package bench

// A cache's convergence is counted in passes over the working set, not in
// runs: a run reads the working set once per read test, so a run of three
// read tests is three passes, and a cache that warms during a run's first
// test serves the second test warm.
const (
	// fullyWarmHitRatio: runs of a test at or above this read hit ratio set
	// the target's warm ceiling for the test.
	fullyWarmHitRatio = 0.95
	// warmFraction: a test counts as warm once its hit ratio and its
	// fraction of the warm ceiling both reach it.
	warmFraction = 0.9
)

// Warmth is how a cached target warmed, per working set and read test.
type Warmth struct {
	WorkingSet string `json:"workingSet"`
	Target     string `json:"target"`
	Test       string `json:"test"`
	// CeilingMBps is the median MB/s of the test's runs whose read hit ratio
	// was at least 0.95: the same volume fully warm ("warm ceiling"). Under
	// emulation the hit path itself stays below the raw SSD, so reaching
	// the ceiling is what a warm cache can do there. Absent when no run
	// was that warm.
	CeilingMBps *float64 `json:"ceilingMBps,omitempty"`
	// PassToWarm is the pass in which the test first reached a hit ratio of
	// 0.9 and 0.9 of the ceiling; nil if it never did.
	PassToWarm *int `json:"passToWarm"`
	// FirstPassOfHDD is the test's first run against the raw HDD: what the
	// cache costs a cold read.
	FirstPassOfHDD *float64 `json:"firstPassOfHDD,omitempty"`
	// FirstPassOfHDDFirst is the same run against the raw HDD's first run of
	// the test: both are the first read of data just laid out, where the
	// median is of runs that follow reads.
	FirstPassOfHDDFirst *float64 `json:"firstPassOfHDDFirst,omitempty"`
}

// numberPasses sets Pass on every read result: 1 + the whole passes over its
// working set that the target's earlier read tests made (fio's bytes over the
// working set's), so a test cut short by -runtime counts for what it read.
// It also sets every fio test's FractionOfWorkingSet.
func numberPasses(r *Report) {
	wsBytes := map[string]int64{}
	for _, ws := range r.Config.WorkingSets {
		wsBytes[ws.Label] = ws.Bytes
	}
	tree, scattered := map[string]bool{}, map[string]bool{}
	for _, t := range r.Config.Tests {
		tree[t.ID] = t.Tree
		scattered[t.ID] = t.Scattered
	}
	read := map[[2]string]int64{} // bytes read so far, by working set and target
	for i := range r.Results {
		res := &r.Results[i]
		size := wsBytes[res.WorkingSet]
		if size > 0 && !tree[res.Test] {
			f := float64(res.IOBytes) / float64(size)
			res.FractionOfWorkingSet = &f
		}
		if testDirection(r.Config, res.Test) != Read || size <= 0 {
			continue
		}
		k := [2]string{res.WorkingSet, res.Target}
		if scattered[res.Test] {
			// A scattered test reads a sample of its hot set (-io-limit):
			// each run is one pass, however few of its bytes it read.
			res.Pass = res.Run
			continue
		}
		res.Pass = int(read[k]/size) + 1
		read[k] += res.IOBytes
	}
}

// partialPass is below the fraction of its working set a test must cover to
// count as a whole pass (fio rounds the last block).
const partialPass = 0.999

// PartialPasses are the results that covered less than their working set
// (a -runtime or -io-limit cut them short), and the least and most of it
// they covered.
func PartialPasses(r *Report) (n int, least, most float64) {
	for _, res := range r.Results {
		f := res.FractionOfWorkingSet
		if f == nil || *f >= partialPass || res.Scatter != nil {
			continue
		}
		if n == 0 || *f < least {
			least = *f
		}
		most = max(most, *f)
		n++
	}
	return n, least, most
}

// warmth derives every cached target's warm ceilings, each result's
// fraction of its ceiling and the pass at which each read test was warm.
func warmth(r *Report) []Warmth {
	var out []Warmth
	for _, ws := range r.Config.WorkingSets {
		for _, t := range r.Config.Targets {
			if t.DMDevice == "" {
				continue // no hit ratio: neither warm nor cold can be told
			}
			for _, test := range r.Config.Tests {
				// A merged report (make bench) has tests that some working
				// sets never ran: no row rather than "no fully warm run".
				if test.Direction == Read && len(resultsOf(r, ws.Label, t.Name, test.ID)) > 0 {
					out = append(out, warmthOf(r, ws.Label, t.Name, test.ID))
				}
			}
		}
	}
	return out
}

func warmthOf(r *Report, ws, target, test string) Warmth {
	w := Warmth{WorkingSet: ws, Target: target, Test: test}
	var idx []int
	for i, res := range r.Results {
		if res.WorkingSet == ws && res.Target == target && res.Test == test {
			idx = append(idx, i)
		}
	}
	warm := FullyWarmMBps(r, ws, target, test)
	if len(idx) > 0 {
		first := r.Results[idx[0]]
		w.FirstPassOfHDD = first.FractionOfHDD
		if hdd := resultsOf(r, ws, r.Config.HDDReference, test); len(hdd) > 0 {
			w.FirstPassOfHDDFirst = Fraction(first.MBps, &hdd[0].MBps)
		}
	}
	if len(warm) == 0 {
		return w
	}
	ceiling := Median(warm)
	w.CeilingMBps = &ceiling
	for _, i := range idx {
		res := &r.Results[i]
		res.FractionOfCeiling = Fraction(res.MBps, &ceiling)
		if w.PassToWarm == nil && res.HitRatio != nil && *res.HitRatio >= warmFraction &&
			*res.FractionOfCeiling >= warmFraction-1e-9 && res.Pass > 0 {
			pass := res.Pass
			w.PassToWarm = &pass
		}
	}
	return w
}

// FullyWarmMBps is the MB/s of the runs of a test whose read hit ratio was
// at least 0.95: the same volume fully warm, whose median is the warm
// ceiling.
func FullyWarmMBps(r *Report, ws, target, test string) []float64 {
	var mbps []float64
	for _, res := range resultsOf(r, ws, target, test) {
		if res.HitRatio != nil && *res.HitRatio >= fullyWarmHitRatio {
			mbps = append(mbps, res.MBps)
		}
	}
	return mbps
}

func testDirection(c Config, id string) Direction {
	for _, t := range c.Tests {
		if t.ID == id {
			return t.Direction
		}
	}
	return "" // unknown: neither read nor write
}
