package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// recordedFio answers every job with the real fio JSON recorded for its test
// (testdata/fio/<test id>.json) and records the arguments it got.
type recordedFio struct {
	mu    sync.Mutex
	calls [][]string
	// failOn makes the nth call (1-based) fail.
	failOn int
}

func (f *recordedFio) Run(_ context.Context, args []string) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, args)
	n := len(f.calls)
	f.mu.Unlock()
	if n == f.failOn {
		return nil, fmt.Errorf("fio: exit 1: injected failure")
	}
	name := argValue(args, "--name")
	if name == "prefill" {
		name = "seq1m-q8t1-write"
	}
	return os.ReadFile(filepath.Join("testdata", "fio", name+".json"))
}

func (f *recordedFio) callsNamed(name string) int {
	n := 0
	for _, c := range f.calls {
		if argValue(c, "--name") == name {
			n++
		}
	}
	return n
}

func argValue(args []string, key string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, key+"="); ok {
			return v
		}
	}
	return ""
}

type fakeInspector map[string]TargetInfo

func (f fakeInspector) Inspect(path string) (TargetInfo, error) {
	info, ok := f[path]
	if !ok {
		return TargetInfo{Kind: KindMissing}, nil
	}
	return info, nil
}

// steppingCounters advances every counter by a fixed step per sample,
// starting close to the 32-bit limit so deltas cross a wrap.
type steppingCounters struct {
	mu      sync.Mutex
	next    map[string]Counters
	start   Counters
	step    Counters
	samples int
}

func newSteppingCounters(start, step Counters) *steppingCounters {
	return &steppingCounters{next: map[string]Counters{}, step: step, start: start}
}

func (s *steppingCounters) Sample(_ context.Context, device string) (Counters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	c, ok := s.next[device]
	if !ok {
		c = s.start
	}
	s.next[device] = Counters{
		ReadHits: wrap32(c.ReadHits + s.step.ReadHits), ReadMisses: wrap32(c.ReadMisses + s.step.ReadMisses),
		WriteHits: wrap32(c.WriteHits + s.step.WriteHits), WriteMisses: wrap32(c.WriteMisses + s.step.WriteMisses),
		Demotions: wrap32(c.Demotions + s.step.Demotions), Promotions: wrap32(c.Promotions + s.step.Promotions),
	}
	return c, nil
}

func wrap32(v uint64) uint64 { return uint64(uint32(v)) }
