package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
)

// part is one ssdcache-bench invocation on freshly created caches.
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
// same targets; each working set ran on caches created cold for it.
func merge(invocations []part) (*bench.Report, error) {
	var merged *bench.Report
	var errs []string
	for _, p := range invocations {
		r, err := parts.ReadReport(p.dir)
		if err != nil {
			return nil, err
		}
		if p.relabel != "" {
			relabel(r, p.relabel)
		}
		if r.Error != "" {
			errs = append(errs, filepath.Base(p.dir)+": "+r.Error)
		}
		if merged == nil {
			merged = r
			continue
		}
		if err := sameTargets(merged.Config.Targets, r.Config.Targets); err != nil {
			return nil, fmt.Errorf("%s: %w", p.dir, err)
		}
		merged.Config.WorkingSets = append(merged.Config.WorkingSets, r.Config.WorkingSets...)
		merged.Config.Tests = unionTests(merged.Config.Tests, r.Config.Tests)
		merged.Config.Runs = max(merged.Config.Runs, r.Config.Runs)
		merged.Config.ReadOnly = merged.Config.ReadOnly && r.Config.ReadOnly
		merged.Results = append(merged.Results, r.Results...)
		merged.Prefilled = append(merged.Prefilled, r.Prefilled...)
		merged.FinishedAt = r.FinishedAt
	}
	if merged == nil {
		return nil, errors.New("no reports to merge")
	}
	merged.Error = strings.Join(errs, "; ")
	bench.Analyze(merged)
	return merged, nil
}

func relabel(r *bench.Report, label string) {
	old := map[string]bool{}
	for i := range r.Config.WorkingSets {
		old[r.Config.WorkingSets[i].Label] = true
		r.Config.WorkingSets[i].Label = label
	}
	for i := range r.Results {
		if old[r.Results[i].WorkingSet] {
			r.Results[i].WorkingSet = label
		}
	}
}

// sameTargets checks that two invocations measured the same targets by name
// and role; paths may differ (a recreated cache can get another device).
func sameTargets(a, b []bench.Target) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d targets, the first invocation had %d", len(b), len(a))
	}
	for i := range a {
		if a[i].Name != b[i].Name || (a[i].DMDevice == "") != (b[i].DMDevice == "") {
			return fmt.Errorf("target %d is %q (dm-cache %q), the first invocation had %q (dm-cache %q)",
				i, b[i].Name, b[i].DMDevice, a[i].Name, a[i].DMDevice)
		}
	}
	return nil
}

// unionTests keeps the matrix order, so reads come before writes, then the
// tree test.
func unionTests(a, b []bench.Test) []bench.Test {
	have := map[string]bool{}
	for _, t := range append(append([]bench.Test{}, a...), b...) {
		have[t.ID] = true
	}
	var out []bench.Test
	for _, t := range append(bench.Matrix(), bench.TreeTest) {
		if have[t.ID] {
			out = append(out, t)
		}
	}
	return out
}
