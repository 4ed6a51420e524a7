package kernel

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// namedOnly are the guest tests no boot runs unless SSDCACHE_GUEST_RUN names
// them, each with the reason its doc comment gives.
var namedOnly = []string{
	"TestColdPassesBackToBack",   // figures of back-to-back passes, not verdicts
	"TestHelperCacheOp",          // a child process of the crash tests, not a test
	"TestSwapWindowAtCacheSizes", // figures of a promotion's swap at 1-64 GiB caches, not verdicts
}

// TestEveryGuestTestRuns: a guest test that no boot's run pattern matches
// would pass CI by never running, as TestPreloadNamedFiles did until its name
// was added to kernelGuestRun.
func TestEveryGuestTestRuns(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("guest", "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no guest tests found: %v", err)
	}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	var runs []*regexp.Regexp
	for _, r := range []string{kernelGuestRun, stressGuestRun, powerLossWrite, powerLossCheck} {
		runs = append(runs, regexp.MustCompile(r))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			name := m[1]
			matched := slices.ContainsFunc(runs, func(r *regexp.Regexp) bool { return r.MatchString(name) })
			if !matched && !slices.Contains(namedOnly, name) {
				t.Errorf("%s (%s) runs in no boot: add it to kernelGuestRun, or to namedOnly with the reason", name, f)
			}
		}
	}
}
