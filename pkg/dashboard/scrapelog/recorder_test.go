package scrapelog

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var start = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// TestRecorderLogsFailedScrapes: a scrape that fails is logged as failed,
// with why; every entry is stamped with the clock's time.
func TestRecorderLogsFailedScrapes(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 2 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "up 1")
	}))
	defer srv.Close()
	clock := clocktesting.NewFakeClock(start)
	entries := make(entryLog, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Recorder{URL: srv.URL, Interval: time.Second, Client: srv.Client(), Clock: clock}.Run(ctx, entries)
	}()
	var got string
	for range 3 {
		for !clock.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clock.Step(time.Second)
		got += <-entries // the scrape is in the log, not only asked for
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s%d\nup 1\n\n%s%d%sstatus 503 Service Unavailable\n%s%d\nup 1\n\n", Marker, start.Add(time.Second).UnixMilli(),
		Marker, start.Add(2*time.Second).UnixMilli(), FailedMarker, Marker, start.Add(3*time.Second).UnixMilli())
	if got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if err := (Recorder{URL: srv.URL, Clock: clock}).Run(ctx, entries); err == nil {
		t.Error("a zero interval was taken")
	}
}

// entryLog hands each write, one log entry, to the test.
type entryLog chan string

func (l entryLog) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}
