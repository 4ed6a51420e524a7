package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// part is one ssdcache-bench invocation of one working set on freshly
// created caches.
type part struct {
	dir string
	// relabel renames the invocation's working set in the merged report:
	// the cold-write pass reuses the first working set's size, and a
	// restaged, restarted or rebooted set its cold set's.
	relabel string
}

// merge joins the invocations into one report: working sets, tests and
// results side by side, then derives references, fractions, convergence and
// overhead again with pkg/bench's own analysis. Every invocation measured the
// same targets; each working set ran on caches created cold for it. The
// restage figures of the disrupted parts come back by their label.
func merge(invocations []part) (*bench.Report, map[string][]parts.Restage, error) {
	var merged *bench.Report
	var errs, tests []string
	restages := map[string][]parts.Restage{}
	for _, p := range invocations {
		r, err := parts.ReadReport(p.dir)
		if err != nil {
			return nil, nil, err
		}
		figures, err := parts.ReadRestage(p.dir)
		if err != nil {
			return nil, nil, err
		}
		if figures != nil {
			restages[p.relabel] = figures
		}
		if p.relabel != "" {
			for i := range r.Config.WorkingSets {
				r.Config.WorkingSets[i].Label = p.relabel
			}
			for i := range r.Results {
				r.Results[i].WorkingSet = p.relabel
			}
		}
		if r.Error != "" {
			errs = append(errs, filepath.Base(p.dir)+": "+r.Error)
		}
		for _, t := range r.Config.Tests {
			tests = append(tests, t.ID)
		}
		if merged == nil {
			merged = r
			continue
		}
		if err := sameTargets(merged.Config.Targets, r.Config.Targets); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p.dir, err)
		}
		merged.Config.WorkingSets = append(merged.Config.WorkingSets, r.Config.WorkingSets...)
		merged.Config.Runs = max(merged.Config.Runs, r.Config.Runs)
		merged.Config.ReadOnly = merged.Config.ReadOnly && r.Config.ReadOnly
		merged.Results = append(merged.Results, r.Results...)
		merged.Prefilled = append(merged.Prefilled, r.Prefilled...)
		// Parts come in report order, not in the order they ran (the 50 %
		// set runs last, for the reboot): the run spans all of them.
		if r.StartedAt.Before(merged.StartedAt) {
			merged.StartedAt = r.StartedAt
		}
		if r.FinishedAt.After(merged.FinishedAt) {
			merged.FinishedAt = r.FinishedAt
		}
	}
	if merged == nil {
		return nil, nil, errors.New("no reports to merge")
	}
	// In matrix order, so reads come before writes, then the tree test.
	var err error
	if merged.Config.Tests, err = bench.SelectTests(tests); err != nil {
		return nil, nil, err
	}
	merged.Error = strings.Join(errs, "; ")
	bench.Analyze(merged)
	return merged, restages, nil
}

// sameTargets checks that two invocations measured the same targets by name
// and role; paths may differ (a recreated cache can get another device).
func sameTargets(a, b []bench.Target) error {
	same := func(x, y bench.Target) bool { return x.Name == y.Name && (x.DMDevice == "") == (y.DMDevice == "") }
	if !slices.EqualFunc(a, b, same) {
		return fmt.Errorf("targets %+v, the first invocation had %+v", b, a)
	}
	return nil
}
