package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// blockingFio never finishes a test: it returns only when its context ends.
type blockingFio struct{}

func (blockingFio) Run(ctx context.Context, _ []string) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

type bigBlockDevice struct{}

func (bigBlockDevice) Inspect(string) (bench.TargetInfo, error) {
	return bench.TargetInfo{Kind: bench.KindBlock, Size: 1 << 30}, nil
}

func hangingBench(t *testing.T) *bench.Bench {
	t.Helper()
	opts, err := parseFlags([]string{"-target", "a=/dev/a", "-working-sets", "1Mi", "-read-only"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bench.New(opts.config, bench.Deps{Fio: blockingFio{}, Inspector: bigBlockDevice{}, Clock: clock.RealClock{}, Progress: io.Discard, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTimeLimitStopsTheBenchWithAClearReport: a bench that would run forever
// stops at -time-limit, and its error and report say so.
func TestTimeLimitStopsTheBenchWithAClearReport(t *testing.T) {
	start := time.Now()
	report, err := runWithin(context.Background(), hangingBench(t), 50*time.Millisecond)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the bench ran %s past a 50ms limit", took)
	}
	const want = "time limit 50ms (-time-limit) reached"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(report.Error, want) {
		t.Fatalf("err = %v, report.Error = %q; want both to say %q", err, report.Error, want)
	}
}

// TestCancelIsNotReportedAsTheTimeLimit: a SIGTERM before the limit keeps its own error.
func TestCancelIsNotReportedAsTheTimeLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	report, err := runWithin(ctx, hangingBench(t), time.Hour)
	if !errors.Is(err, context.Canceled) || strings.Contains(report.Error, "time limit") {
		t.Fatalf("err = %v, report.Error = %q; want the cancellation, not the time limit", err, report.Error)
	}
}
