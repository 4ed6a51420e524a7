package bench

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Target is a block device or a file in a mounted volume to measure, or,
// for the tree test, a directory of a mounted filesystem.
type Target struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// DMDevice names the dm-cache device under the target (a dm name or a
	// /dev/mapper path); empty when the target is not a dm-cache device.
	DMDevice string `json:"dmDevice,omitempty"`
}

// WorkingSetPlaceholder in a target's path (and dm-cache device) stands for
// the working set's number, 1-based: "/data/ws-{ws}/bench.dat" reads a volume
// of its own per working set, so that no working set starts on a cache an
// earlier one filled (the chart's bench Job mounts one PVC per working set).
const WorkingSetPlaceholder = "{ws}"

// For is the target as working set n (1-based) reads it.
func (t Target) For(n int) Target {
	num := strconv.Itoa(n)
	t.Path = strings.ReplaceAll(t.Path, WorkingSetPlaceholder, num)
	t.DMDevice = strings.ReplaceAll(t.DMDevice, WorkingSetPlaceholder, num)
	return t
}

// WorkingSet is the region of every target that a working set's tests touch.
type WorkingSet struct {
	Label       string `json:"label"` // as given on the command line: "256Mi" or "25%"
	Bytes       int64  `json:"bytes"`
	OffsetBytes int64  `json:"offsetBytes"`
	// CacheAtStart says, per measured target, what its cache could hold
	// when the working set's first test began (set by Run; a merged report
	// keeps each invocation's).
	CacheAtStart []CacheStart `json:"cacheAtStart,omitempty"`
}

// CacheStart is what one target's cache could hold when a working set began.
type CacheStart struct {
	Target string `json:"target"`
	Path   string `json:"path"`
	// OwnPath: no other working set of the run reads this path. With one
	// volume per path (the chart's bench Job: one PVC, so one cache, per
	// working set) nothing else the run read is in its cache.
	OwnPath bool `json:"ownPath"`
	// LaidOut: this run wrote the path's file or tree before run 1, so the
	// volume held none of the data before the run.
	LaidOut bool `json:"laidOut"`
	// After lists the working sets read earlier through the same path: the
	// cache was not reset between them and may still hold what they read.
	After []string `json:"after,omitempty"`
}

// Fresh says the cache held nothing of the working set or of any other:
// its own volume, laid out by this run.
func (c CacheStart) Fresh() bool { return c.OwnPath && c.LaidOut && len(c.After) == 0 }

// Config is a validated benchmark plan's input.
type Config struct {
	Targets  []Target      `json:"targets"`
	Runs     int           `json:"runs"`
	Interval time.Duration `json:"-"`
	// TestInterval is a pause after every test of a target other than the
	// references, as CrystalDiskMark pauses between tests: a caching
	// layer's background work (promotions, migrations, writeback) then runs
	// in its own target's time, as between an application's bursts of
	// reads, not during the next target's test on the same disks.
	TestInterval time.Duration `json:"-"`
	WorkingSets  []WorkingSet  `json:"workingSets"`
	Tests        []Test        `json:"tests"`
	// ReadOnly runs only read tests and passes --readonly to fio, for targets
	// that hold data that must not change.
	ReadOnly bool `json:"readOnly"`
	// RuntimeLimit caps each test (0: one full pass over the working set).
	RuntimeLimit time.Duration `json:"-"`
	// IOLimit caps the bytes each test transfers (0: the working set).
	IOLimit  int64  `json:"ioLimitBytes"`
	RandSeed uint64 `json:"randSeed"`
	// SSDReference and HDDReference name targets measured as raw devices.
	SSDReference string `json:"ssdReference,omitempty"`
	HDDReference string `json:"hddReference,omitempty"`
	// ConvergeFraction of raw SSD read throughput counts as converged.
	ConvergeFraction float64 `json:"convergeFraction"`
	// PlotTest is the test whose MB/s the plot shows.
	PlotTest string `json:"plotTest"`
	// ScatterZones is the number of hot zones of the scattered test, spread
	// evenly over each target (a divisor of 100).
	ScatterZones int `json:"scatterZones,omitempty"`
	// ScatterBlockBytes is the cache block in which the scattered test's
	// touched blocks are counted.
	ScatterBlockBytes int64 `json:"scatterBlockBytes,omitempty"`
	// IOLogDir is where fio's I/O log of each scattered test goes (read
	// back and removed after the test).
	IOLogDir string `json:"-"`
}

// MinWorkingSet keeps every working set at least one SEQ1M block.
const MinWorkingSet = 1 << 20

var targetNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$`)

// ParseTarget parses "name=path".
func ParseTarget(spec string) (Target, error) {
	name, path, ok := strings.Cut(spec, "=")
	if !ok || path == "" {
		return Target{}, fmt.Errorf("target %q: want name=path, e.g. raw-ssd=/dev/disk/by-id/nvme-X", spec)
	}
	if !targetNameRE.MatchString(name) || len(name) > 63 {
		return Target{}, fmt.Errorf("target %q: name %q must be 1-63 lower-case letters, digits, '-', '_' or '.'", spec, name)
	}
	return Target{Name: name, Path: path}, nil
}

// ParseWorkingSets turns "256Mi", "1073741824" or "25%" (of cacheSize) into
// working sets rounded down to whole MiB. With disjoint, each set starts where
// the previous one ends, so a set never reads blocks a smaller set warmed.
func ParseWorkingSets(specs []string, cacheSize int64, disjoint bool) ([]WorkingSet, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("working-sets: none given; want sizes like 256Mi or percentages of -cache-size like 25%%")
	}
	var sets []WorkingSet
	var offset int64
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		bytes, err := parseSize(spec, cacheSize)
		if err != nil {
			return nil, err
		}
		bytes -= bytes % MinWorkingSet
		if bytes < MinWorkingSet {
			return nil, fmt.Errorf("working-sets: %q is %d bytes; allowed: at least 1Mi", spec, bytes)
		}
		sets = append(sets, WorkingSet{Label: spec, Bytes: bytes, OffsetBytes: offset})
		if disjoint {
			offset += bytes
		}
	}
	return sets, nil
}

func parseSize(spec string, cacheSize int64) (int64, error) {
	if pct, ok := strings.CutSuffix(spec, "%"); ok {
		p, err := strconv.ParseFloat(pct, 64)
		if err != nil || p <= 0 || p > 1000 {
			return 0, fmt.Errorf("working-sets: %q: allowed percentages are in (0, 1000]", spec)
		}
		if cacheSize <= 0 {
			return 0, fmt.Errorf("working-sets: %q is a percentage, so -cache-size must be given (got %d)", spec, cacheSize)
		}
		return int64(float64(cacheSize) * p / 100), nil
	}
	return ParseBytes("working-sets", spec)
}

// ParseBytes parses a Kubernetes quantity ("512Mi", "1G") or plain bytes.
func ParseBytes(field, spec string) (int64, error) {
	q, err := resource.ParseQuantity(spec)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%s: %q is not a size; allowed: bytes or a quantity like 512Mi, 4Gi", field, spec)
	}
	v, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("%s: %q is not a whole number of bytes", field, spec)
	}
	return v, nil
}

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error {
	if err := c.validateTargets(); err != nil {
		return err
	}
	if c.Runs < 1 || c.Runs > 1000 {
		return fmt.Errorf("runs: %d; allowed: 1..1000", c.Runs)
	}
	if c.Interval < 0 || c.TestInterval < 0 || c.RuntimeLimit < 0 || c.IOLimit < 0 {
		return fmt.Errorf("interval (%s), test-interval (%s), runtime (%s) and io-limit (%d) must not be negative", c.Interval, c.TestInterval, c.RuntimeLimit, c.IOLimit)
	}
	if len(c.WorkingSets) == 0 || len(c.Tests) == 0 {
		return fmt.Errorf("working-sets (%d) and tests (%d): at least one of each is needed", len(c.WorkingSets), len(c.Tests))
	}
	if c.ReadOnly {
		for _, t := range c.Tests {
			if t.Direction != Read {
				return fmt.Errorf("tests: %q writes, but read-only is set; allowed in read-only mode: read tests", t.ID)
			}
		}
	}
	if c.tree() && len(c.Tests) > 1 {
		return fmt.Errorf("tests: %s reads files in directory targets and runs alone; allowed beside it: no other test (run the block tests in another invocation)", TreeTest.ID)
	}
	if err := c.validateScatter(); err != nil {
		return err
	}
	if c.ConvergeFraction <= 0 || c.ConvergeFraction > 1 {
		return fmt.Errorf("converge-fraction: %v; allowed: (0, 1]", c.ConvergeFraction)
	}
	if _, ok := c.test(c.PlotTest); !ok {
		return fmt.Errorf("plot-test: %q is not among the selected tests", c.PlotTest)
	}
	return nil
}

func (c *Config) validateTargets() error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("targets: none given; want name=path, several allowed")
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		if seen[t.Name] {
			return fmt.Errorf("targets: name %q given twice", t.Name)
		}
		seen[t.Name] = true
	}
	for field, ref := range map[string]string{"ssd-ref": c.SSDReference, "hdd-ref": c.HDDReference} {
		if ref != "" && !seen[ref] {
			return fmt.Errorf("%s: %q is not a target name", field, ref)
		}
	}
	if c.SSDReference != "" && c.SSDReference == c.HDDReference {
		return fmt.Errorf("ssd-ref and hdd-ref: both name %q; they must differ", c.SSDReference)
	}
	return nil
}

// validateScatter checks what the scattered test needs before any I/O;
// the zones' placement is checked against each target's size when the
// targets are inspected.
func (c *Config) validateScatter() error {
	if !c.scattered() {
		return nil
	}
	if c.IOLogDir == "" {
		return fmt.Errorf("iolog-dir: empty; the test %s needs a directory for fio's I/O log", ScatteredTest.ID)
	}
	if c.ScatterBlockBytes < ScatteredTest.BlockSize || c.ScatterBlockBytes%ScatteredTest.BlockSize != 0 {
		return fmt.Errorf("scatter-block-size: %d; allowed: a multiple of 4 KiB, e.g. 256Ki (ssdcache's cache block)", c.ScatterBlockBytes)
	}
	for _, ws := range c.WorkingSets {
		if _, err := PlanScatter(1<<62, ws.Bytes, c.ScatterZones); err != nil {
			return err
		}
	}
	return nil
}

// scattered says whether the plan runs the scattered test.
func (c *Config) scattered() bool {
	return slices.ContainsFunc(c.Tests, func(t Test) bool { return t.Scattered })
}

// tree says whether the plan runs the application-load profile.
func (c *Config) tree() bool {
	return slices.ContainsFunc(c.Tests, func(t Test) bool { return t.Tree })
}

func (c *Config) test(id string) (Test, bool) {
	for _, t := range c.Tests {
		if t.ID == id {
			return t, true
		}
	}
	return Test{}, false
}

// span is the number of bytes from the start of a shared target path that the plan touches.
func (c *Config) span() int64 {
	var end int64
	for _, ws := range c.WorkingSets {
		end = max(end, ws.OffsetBytes+ws.Bytes)
	}
	return end
}

// layout is one path of a target that the plan reads, and the bytes from
// its start that the working sets on it touch.
type layout struct {
	target Target // as the working sets on the path see it
	span   int64
}

// layouts are the distinct paths of every target, in target and working
// set order: one per target, or one per working set where the path names
// it ({ws}).
func (c *Config) layouts() []layout {
	var out []layout
	for _, t := range c.Targets {
		index := map[string]int{}
		for i, ws := range c.WorkingSets {
			rt := t.For(i + 1)
			j, seen := index[rt.Path]
			if !seen {
				j = len(out)
				index[rt.Path] = j
				out = append(out, layout{target: rt})
			}
			out[j].span = max(out[j].span, ws.OffsetBytes+ws.Bytes)
		}
	}
	return out
}
