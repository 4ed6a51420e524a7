package memlimit

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// recorder stands for runtime/debug.SetMemoryLimit: it keeps the limit and
// reports the previous one, and a negative value only reads it.
type recorder struct {
	limit int64
	sets  []int64
}

func (r *recorder) set(n int64) int64 {
	prev := r.limit
	if n >= 0 {
		r.limit = n
		r.sets = append(r.sets, n)
	}
	return prev
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestApplySetsAShareOfTheContainerLimit(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want int64 // the soft limit set; 0: none set
	}{
		{"512Mi from the downward API, default ratio", map[string]string{LimitEnv: "536870912"}, 483183820},
		{"a quantity", map[string]string{LimitEnv: "512Mi"}, 483183820},
		{"ratio 0.75", map[string]string{LimitEnv: "1Gi", RatioEnv: "0.75"}, 805306368},
		{"ratio 1", map[string]string{LimitEnv: "1Gi", RatioEnv: "1"}, 1 << 30},
		{"no limit variable", map[string]string{}, 0},
		{"empty limit", map[string]string{LimitEnv: " "}, 0},
		{"zero limit", map[string]string{LimitEnv: "0"}, 0},
		{"cgroup's max", map[string]string{LimitEnv: "max"}, 0},
		{"ratio 0 turns it off", map[string]string{LimitEnv: "1Gi", RatioEnv: "0"}, 0},
		{"a limit too large for int64 once read", map[string]string{LimitEnv: "8Ei", RatioEnv: "1"}, math.MaxInt64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{limit: math.MaxInt64}
			l, err := Apply(env(c.env), r.set)
			if err != nil {
				t.Fatal(err)
			}
			if l.SoftLimit != c.want {
				t.Errorf("SoftLimit = %d, want %d", l.SoftLimit, c.want)
			}
			switch {
			case c.want == 0 && len(r.sets) != 0:
				t.Errorf("set %v, want no call: the runtime keeps its default", r.sets)
			case c.want != 0 && (len(r.sets) != 1 || r.sets[0] != c.want):
				t.Errorf("set %v, want [%d]", r.sets, c.want)
			}
		})
	}
}

// TestGOMEMLIMITWins: a GOMEMLIMIT given by hand was applied by the runtime
// at start; the container limit must not replace it.
func TestGOMEMLIMITWins(t *testing.T) {
	r := &recorder{limit: 400 << 20}
	l, err := Apply(env(map[string]string{GoEnv: "400MiB", LimitEnv: "536870912"}), r.set)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.sets) != 0 {
		t.Errorf("set %v over GOMEMLIMIT", r.sets)
	}
	if l.SoftLimit != 400<<20 || l.FromGOMEMLIMIT != "400MiB" {
		t.Errorf("limit = %+v, want the runtime's 400MiB from GOMEMLIMIT", l)
	}
	if s := l.String(); !strings.Contains(s, "GOMEMLIMIT=400MiB") || !strings.Contains(s, "400.0MiB") {
		t.Errorf("log says %q, want the limit and GOMEMLIMIT", s)
	}
}

func TestApplyRefusesWhatItCannotRead(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // the variable the error must name
	}{
		{"limit not a quantity", map[string]string{LimitEnv: "half a gig"}, LimitEnv},
		{"negative limit", map[string]string{LimitEnv: "-1"}, LimitEnv},
		{"limit in MiB, not bytes", map[string]string{LimitEnv: "512"}, LimitEnv},
		{"ratio above 1", map[string]string{LimitEnv: "1Gi", RatioEnv: "90"}, RatioEnv},
		{"negative ratio", map[string]string{LimitEnv: "1Gi", RatioEnv: "-0.5"}, RatioEnv},
		{"ratio NaN", map[string]string{LimitEnv: "1Gi", RatioEnv: "NaN"}, RatioEnv},
		{"ratio as a percentage", map[string]string{LimitEnv: "1Gi", RatioEnv: "90%"}, RatioEnv},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{limit: math.MaxInt64}
			_, err := Apply(env(c.env), r.set)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %s", err, c.want)
			}
			if len(r.sets) != 0 {
				t.Errorf("set %v despite the error", r.sets)
			}
		})
	}
}

func TestLimitString(t *testing.T) {
	cases := map[string]Limit{
		"460.8MiB (0.9 of SSDCACHE_MEMORY_LIMIT=512.0MiB)": {SoftLimit: 483183820, ContainerLimit: 512 << 20, Ratio: 0.9},
		"none (no SSDCACHE_MEMORY_LIMIT)":                  {},
		"none (SSDCACHE_MEMORY_LIMIT_RATIO=0)":             {ContainerLimit: 512 << 20},
	}
	for want, l := range cases {
		if got := l.String(); got != want {
			t.Errorf("%+v: %q, want %q", l, got, want)
		}
	}
}

// TestApplyToTheRuntime: the binaries pass debug.SetMemoryLimit, and the
// runtime then reports the soft limit Apply gave.
func TestApplyToTheRuntime(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	l, err := Apply(env(map[string]string{LimitEnv: "256Mi", RatioEnv: "0.5"}), debug.SetMemoryLimit)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 128<<20 || l.SoftLimit != got {
		t.Errorf("runtime limit %d, Apply said %d, want %d", got, l.SoftLimit, 128<<20)
	}
}
