// Package memlimit gives the Go runtime of ssdcache-controller and
// ssdcache-node a soft memory limit (runtime/debug.SetMemoryLimit, what
// GOMEMLIMIT sets) below their container's memory limit, so that the garbage
// collector works harder as the heap nears the limit instead of the kernel's
// OOM killer ending the process there.
//
// The chart passes the container's limit through the downward API
// (resourceFieldRef limits.memory) in LimitEnv and the share of it in
// RatioEnv. The runtime cannot take a share itself: GOMEMLIMIT holds an
// absolute size, and resourceFieldRef divides only by powers of ten or two.
package memlimit

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

const (
	// LimitEnv holds the container's memory limit: bytes (as resourceFieldRef
	// with divisor 1 gives them) or a quantity such as 512Mi. Unset, empty,
	// "0" or "max" (cgroup v2's spelling of no limit) set no soft limit.
	LimitEnv = "SSDCACHE_MEMORY_LIMIT"
	// RatioEnv holds the share of LimitEnv given to the Go runtime, from 0
	// to 1; unset means DefaultRatio, 0 sets no soft limit.
	RatioEnv = "SSDCACHE_MEMORY_LIMIT_RATIO"
	// GoEnv is the Go runtime's own variable; when set, the runtime applied
	// it at start and it wins over LimitEnv.
	GoEnv = "GOMEMLIMIT"
	// DefaultRatio leaves 10 % of the container's limit to what the Go
	// runtime does not manage but the cgroup counts: the page cache of the
	// files the process reads and writes, kernel memory of its sockets, and
	// in the node plugin the lvm and dmsetup commands it runs.
	DefaultRatio = 0.9
	// minContainerLimit is below any memory limit a container starts with:
	// a smaller LimitEnv was given in other units than bytes (a
	// resourceFieldRef divisor of 1Mi gives 512 for 512Mi), and taken as
	// bytes it would keep the GC running without pause.
	minContainerLimit = 4 << 20
)

// Limit is the soft memory limit a process runs with, and where it came from.
type Limit struct {
	// SoftLimit is the Go runtime's memory limit in bytes; 0 means none
	// (the runtime's default, math.MaxInt64).
	SoftLimit int64
	// ContainerLimit is LimitEnv's value in bytes; 0 when it gave none.
	ContainerLimit int64
	// Ratio is the share of ContainerLimit that SoftLimit is.
	Ratio float64
	// FromGOMEMLIMIT is GoEnv's value when it was set (and SoftLimit is
	// what the runtime made of it).
	FromGOMEMLIMIT string
}

// String says the limit and its source, for the start-up log line.
func (l Limit) String() string {
	switch {
	case l.FromGOMEMLIMIT != "":
		return fmt.Sprintf("%s (%s=%s; %s ignored)", mib(l.SoftLimit), GoEnv, l.FromGOMEMLIMIT, LimitEnv)
	case l.SoftLimit > 0:
		return fmt.Sprintf("%s (%g of %s=%s)", mib(l.SoftLimit), l.Ratio, LimitEnv, mib(l.ContainerLimit))
	case l.ContainerLimit > 0:
		return fmt.Sprintf("none (%s=0)", RatioEnv)
	default:
		return fmt.Sprintf("none (no %s)", LimitEnv)
	}
}

func mib(bytes int64) string {
	return strconv.FormatFloat(float64(bytes)/(1<<20), 'f', 1, 64) + "MiB"
}

// Apply reads LimitEnv, RatioEnv and GoEnv through getenv and gives the
// runtime its soft limit through setLimit (runtime/debug.SetMemoryLimit,
// which with a negative value only reports the current one). A value it
// cannot read is an error, and nothing is set.
func Apply(getenv func(string) string, setLimit func(int64) int64) (Limit, error) {
	if goLimit := strings.TrimSpace(getenv(GoEnv)); goLimit != "" {
		return Limit{SoftLimit: setLimit(-1), FromGOMEMLIMIT: goLimit}, nil
	}
	l, err := plan(getenv)
	if err != nil || l.SoftLimit == 0 {
		return l, err
	}
	setLimit(l.SoftLimit)
	return l, nil
}

// plan works out the soft limit LimitEnv and RatioEnv ask for, without
// GoEnv and without setting it.
func plan(getenv func(string) string) (Limit, error) {
	container, err := containerLimit(getenv(LimitEnv))
	if err != nil {
		return Limit{}, err
	}
	ratio, err := parseRatio(getenv(RatioEnv))
	if err != nil {
		return Limit{}, err
	}
	l := Limit{ContainerLimit: container, Ratio: ratio}
	if container == 0 || ratio == 0 {
		return l, nil
	}
	soft := float64(container) * ratio
	if soft >= math.MaxInt64 {
		l.SoftLimit = math.MaxInt64
	} else {
		l.SoftLimit = max(int64(soft), 1)
	}
	return l, nil
}

func containerLimit(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "max" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit in bytes or as a quantity (512Mi), or max for none", LimitEnv, v)
	}
	if n := q.Value(); n != 0 && n < minContainerLimit {
		return 0, fmt.Errorf("%s=%q: below 4Mi, so not the container's memory limit in bytes (a resourceFieldRef divisor other than 1?)", LimitEnv, v)
	}
	return q.Value(), nil
}

func parseRatio(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return DefaultRatio, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return 0, fmt.Errorf("%s=%q: want a share of the memory limit from 0 (no soft limit) to 1", RatioEnv, v)
	}
	return r, nil
}
