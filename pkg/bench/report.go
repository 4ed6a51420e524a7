package bench

import (
	"encoding/json"
	"slices"
	"time"
)

// SchemaVersion is report.json's schema version (docs/bench.md).
const SchemaVersion = 1

// Report is everything one benchmark invocation measured and derived.
type Report struct {
	SchemaVersion int `json:"schemaVersion"`
	// Version is the version of the ssdcache-bench that measured.
	Version    string    `json:"version"`
	FioVersion string    `json:"fioVersion"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	Config     Config    `json:"config"`
	// Prefilled lists targets whose files were laid out before run 1.
	Prefilled []string `json:"prefilled"`
	// Disks are the devices under each target whose figures the results carry.
	Disks       []TargetDisks `json:"disks,omitempty"`
	Results     []Result      `json:"results"`
	References  []Reference   `json:"references"`
	Convergence []Convergence `json:"convergence"`
	// Warmth is each cached target's warm ceiling and the pass at which
	// each read test was warm (targets with a dm-cache device only).
	Warmth   []Warmth   `json:"warmth"`
	Overhead []Overhead `json:"overhead"`
	// Scattered are the scattered test's figures per working set and
	// target, from counters (absent without that test).
	Scattered []Scattered `json:"scattered,omitempty"`
	// Error is set when the benchmark stopped early; the rest is what it had.
	Error string `json:"error,omitempty"`
}

// Result is one test of one run on one target and working set.
type Result struct {
	WorkingSet string    `json:"workingSet"`
	Target     string    `json:"target"`
	Run        int       `json:"run"`
	Test       string    `json:"test"`
	StartedAt  time.Time `json:"startedAt"`
	Measurement
	// Counters are the dm-cache counter deltas over the test (dm-cache targets only).
	Counters *Counters `json:"counters,omitempty"`
	// HitRatio is the read hit ratio for read tests and the write hit ratio
	// for write tests; absent when the target has no counters or did no I/O.
	HitRatio      *float64 `json:"hitRatio,omitempty"`
	FractionOfSSD *float64 `json:"fractionOfSSD,omitempty"`
	FractionOfHDD *float64 `json:"fractionOfHDD,omitempty"`
	// Pass is the pass over the working set this read test made (1-based;
	// every read test of every run is one pass). Absent for writes.
	Pass int `json:"pass,omitempty"`
	// FractionOfWorkingSet is IOBytes over the working set's bytes: below 1
	// when -runtime or -io-limit cut the pass short. Absent for tree tests.
	FractionOfWorkingSet *float64 `json:"fractionOfWorkingSet,omitempty"`
	// FractionOfCeiling is MB/s over the target's warm ceiling (Warmth).
	FractionOfCeiling *float64 `json:"fractionOfCeiling,omitempty"`
	// Disks are iostat's figures of the target's device and the disks
	// beneath it over the test (Report.Disks describes them).
	Disks []DiskFigures `json:"disks,omitempty"`
	// Scatter is what a scattered test read (ScatteredTest only).
	Scatter *ScatterPass `json:"scatter,omitempty"`
}

// TargetDisks are the devices seen under one target during the runs.
type TargetDisks struct {
	Target string `json:"target"`
	Disks  []Disk `json:"disks"`
}

// describeDisks adds the disks not yet described under a target.
func (r *Report) describeDisks(target string, disks []Disk) {
	i := slices.IndexFunc(r.Disks, func(td TargetDisks) bool { return td.Target == target })
	if i < 0 {
		r.Disks = append(r.Disks, TargetDisks{Target: target})
		i = len(r.Disks) - 1
	}
	for _, d := range disks {
		if !slices.ContainsFunc(r.Disks[i].Disks, func(seen Disk) bool { return seen.Name == d.Name }) {
			r.Disks[i].Disks = append(r.Disks[i].Disks, d)
		}
	}
}

// Reference is the median over runs of a reference target, per working set and test.
type Reference struct {
	WorkingSet string   `json:"workingSet"`
	Test       string   `json:"test"`
	SSDMBps    *float64 `json:"ssdMBps,omitempty"`
	HDDMBps    *float64 `json:"hddMBps,omitempty"`
	SSDLatP50  *float64 `json:"ssdLatP50us,omitempty"`
	HDDLatP50  *float64 `json:"hddLatP50us,omitempty"`
}

// Convergence says when a target's read test first reached the converge
// fraction of the raw SSD.
type Convergence struct {
	WorkingSet string `json:"workingSet"`
	Target     string `json:"target"`
	Test       string `json:"test"`
	// RunsToConverge is the first run at or above the fraction; nil: not converged.
	RunsToConverge    *int     `json:"runsToConverge"`
	LastFractionOfSSD *float64 `json:"lastFractionOfSSD"`
}

// OverheadKind names what an overhead row compares.
type OverheadKind string

const (
	// CacheHit compares a cached target's last run with the raw SSD.
	CacheHit OverheadKind = "cache-hit"
	// ColdMiss compares a cached target's first run with the raw HDD.
	ColdMiss OverheadKind = "cold-miss"
)

// Overhead is the cost of the caching layer at queue depth 1, as a ratio
// against the raw device that serves the I/O.
type Overhead struct {
	WorkingSet string       `json:"workingSet"`
	Target     string       `json:"target"`
	Kind       OverheadKind `json:"kind"`
	Test       string       `json:"test"`
	Run        int          `json:"run"`
	Reference  string       `json:"reference"`
	// ThroughputRatio is target MB/s over reference MB/s (1 = no overhead).
	ThroughputRatio float64 `json:"throughputRatio"`
	// LatencyP50Ratio is target p50 over reference p50 (1 = no overhead).
	LatencyP50Ratio float64 `json:"latencyP50Ratio"`
	// HitRatio of the target's run, when known, shows whether the run really hit or missed.
	HitRatio *float64 `json:"hitRatio,omitempty"`
}

// MarshalJSON writes durations as seconds, which every reader understands.
func (c Config) MarshalJSON() ([]byte, error) {
	type plain Config
	return json.Marshal(struct {
		plain
		IntervalSeconds     float64 `json:"intervalSeconds"`
		TestIntervalSeconds float64 `json:"testIntervalSeconds"`
		RuntimeLimitSeconds float64 `json:"runtimeLimitSeconds"`
	}{plain(c), c.Interval.Seconds(), c.TestInterval.Seconds(), c.RuntimeLimit.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config
	var v struct {
		plain
		IntervalSeconds     float64 `json:"intervalSeconds"`
		TestIntervalSeconds float64 `json:"testIntervalSeconds"`
		RuntimeLimitSeconds float64 `json:"runtimeLimitSeconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Config(v.plain)
	c.Interval = time.Duration(v.IntervalSeconds * float64(time.Second))
	c.TestInterval = time.Duration(v.TestIntervalSeconds * float64(time.Second))
	c.RuntimeLimit = time.Duration(v.RuntimeLimitSeconds * float64(time.Second))
	return nil
}
