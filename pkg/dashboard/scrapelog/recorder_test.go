package scrapelog

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
	var log syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Recorder{URL: srv.URL, Interval: time.Second, Client: srv.Client(), Clock: clock}.Run(ctx, &log)
	}()
	for i := 1; i <= 3; i++ {
		for !clock.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clock.Step(time.Second)
		for strings.Count(log.String(), Marker) < i { // the scrape is in the log, not only asked for
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s%d\nup 1\n\n%s%d%sstatus 503 Service Unavailable\n%s%d\nup 1\n\n", Marker, start.Add(time.Second).UnixMilli(),
		Marker, start.Add(2*time.Second).UnixMilli(), FailedMarker, Marker, start.Add(3*time.Second).UnixMilli())
	if got := log.String(); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if err := (Recorder{URL: srv.URL, Clock: clock}).Run(ctx, &log); err == nil {
		t.Error("a zero interval was taken")
	}
}

// syncBuffer is a log the recorder writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
