package bench

import "sort"

// Analyze derives references, per-result fractions, convergence and overhead
// from r.Results. It is idempotent and only reads r.Config and r.Results.
func Analyze(r *Report) {
	refs := references(r)
	r.References = refs.list(r.Config)
	for i := range r.Results {
		res := &r.Results[i]
		key := refKey{res.WorkingSet, res.Test}
		res.FractionOfSSD = Fraction(res.MBps, refs.ssd[key])
		res.FractionOfHDD = Fraction(res.MBps, refs.hdd[key])
	}
	r.Convergence = convergence(r)
	numberPasses(r)
	r.Warmth = warmth(r)
	r.Overhead = overhead(r, refs)
	r.Scattered = scattered(r, r.Scattered)
	nonNil(r)
}

// nonNil makes empty lists [] in report.json rather than null, so readers
// need not tell "none" from "missing".
func nonNil(r *Report) {
	if r.Prefilled == nil {
		r.Prefilled = []string{}
	}
	if r.Results == nil {
		r.Results = []Result{}
	}
	if r.References == nil {
		r.References = []Reference{}
	}
	if r.Convergence == nil {
		r.Convergence = []Convergence{}
	}
	if r.Warmth == nil {
		r.Warmth = []Warmth{}
	}
	if r.Overhead == nil {
		r.Overhead = []Overhead{}
	}
}

type refKey struct{ workingSet, test string }

type refTable struct {
	ssd, hdd       map[refKey]*float64 // median MB/s
	ssdLat, hddLat map[refKey]*float64 // median p50 latency, us
}

// references takes the median over runs, so one disturbed run of a raw device
// does not move every fraction of the report.
func references(r *Report) refTable {
	t := refTable{ssd: map[refKey]*float64{}, hdd: map[refKey]*float64{}, ssdLat: map[refKey]*float64{}, hddLat: map[refKey]*float64{}}
	mbps, lat := map[string]map[refKey][]float64{}, map[string]map[refKey][]float64{}
	for _, res := range r.Results {
		if mbps[res.Target] == nil {
			mbps[res.Target], lat[res.Target] = map[refKey][]float64{}, map[refKey][]float64{}
		}
		k := refKey{res.WorkingSet, res.Test}
		mbps[res.Target][k] = append(mbps[res.Target][k], res.MBps)
		lat[res.Target][k] = append(lat[res.Target][k], res.LatP50us)
	}
	fill := func(dst map[refKey]*float64, src map[refKey][]float64) {
		for k, v := range src {
			m := Median(v)
			dst[k] = &m
		}
	}
	fill(t.ssd, mbps[r.Config.SSDReference])
	fill(t.ssdLat, lat[r.Config.SSDReference])
	fill(t.hdd, mbps[r.Config.HDDReference])
	fill(t.hddLat, lat[r.Config.HDDReference])
	return t
}

func (t refTable) list(cfg Config) []Reference {
	var out []Reference
	for _, ws := range cfg.WorkingSets {
		for _, test := range cfg.Tests {
			k := refKey{ws.Label, test.ID}
			if t.ssd[k] == nil && t.hdd[k] == nil {
				continue
			}
			out = append(out, Reference{WorkingSet: ws.Label, Test: test.ID,
				SSDMBps: t.ssd[k], HDDMBps: t.hdd[k], SSDLatP50: t.ssdLat[k], HDDLatP50: t.hddLat[k]})
		}
	}
	return out
}

// Median is the middle value of v (the mean of the two middle ones for an
// even count); v is left as it was.
func Median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Fraction is v/ref, or nil without a positive reference.
func Fraction(v float64, ref *float64) *float64 {
	if ref == nil || *ref <= 0 {
		return nil
	}
	f := v / *ref
	return &f
}

// convergence finds, per working set, target and read test, the first run at
// or above the converge fraction of the raw SSD. The SSD reference itself is
// left out: it converges by definition.
func convergence(r *Report) []Convergence {
	if r.Config.SSDReference == "" {
		return nil
	}
	var out []Convergence
	for _, ws := range r.Config.WorkingSets {
		for _, t := range r.Config.Targets {
			if t.Name == r.Config.SSDReference {
				continue
			}
			for _, test := range r.Config.Tests {
				if test.Direction != Read {
					continue
				}
				if c, ok := convergenceOf(r, ws.Label, t.Name, test.ID); ok {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func convergenceOf(r *Report, ws, target, test string) (Convergence, bool) {
	c := Convergence{WorkingSet: ws, Target: target, Test: test}
	seen := false
	for _, res := range r.Results {
		if res.WorkingSet != ws || res.Target != target || res.Test != test || res.FractionOfSSD == nil {
			continue
		}
		seen = true
		f := *res.FractionOfSSD
		c.LastFractionOfSSD = &f
		if c.RunsToConverge == nil && f >= r.Config.ConvergeFraction {
			run := res.Run
			c.RunsToConverge = &run
		}
	}
	return c, seen
}
