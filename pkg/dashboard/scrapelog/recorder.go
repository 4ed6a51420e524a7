// Package scrapelog records a Prometheus text endpoint into a log of
// stamped scrapes, for pkg/dashboard to read back: small enough to run
// beside what it scrapes (make bench's guest), without PromQL in its binary.
package scrapelog

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Marker starts each scrape in a log, followed by its time in Unix
// milliseconds, then either a newline and the scrape's text exposition
// (without timestamps of its own) or FailedMarker and why it failed.
const (
	Marker       = "# scrape "
	FailedMarker = " failed: "
)

// Recorder scrapes a Prometheus text endpoint every Interval and appends
// each scrape to a log that dashboard.Load reads. A scrape that fails (the
// plugin is restarting) is logged as failed, so its series go stale there as
// they would in Prometheus.
type Recorder struct {
	URL      string
	Interval time.Duration
	Client   *http.Client
	Clock    clock.WithTicker
}

// Run records until ctx ends.
func (r Recorder) Run(ctx context.Context, log io.Writer) error {
	if r.Interval <= 0 {
		return fmt.Errorf("recording %s: interval %v, want a positive duration", r.URL, r.Interval)
	}
	ticker := r.Clock.NewTicker(r.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			if err := r.scrape(ctx, log); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Scrape failed", "url", r.URL, "err", err)
			}
		}
	}
}

// scrape reads the endpoint whole before writing, so a failed scrape leaves
// no partial entry in the log, only its failure.
func (r Recorder) scrape(ctx context.Context, log io.Writer) error {
	at := r.Clock.Now()
	body, err := r.get(ctx)
	if err != nil {
		if ctx.Err() == nil {
			_, _ = fmt.Fprintf(log, "%s%d%s%s\n", Marker, at.UnixMilli(), FailedMarker, strings.ReplaceAll(err.Error(), "\n", " "))
		}
		return err
	}
	_, err = fmt.Fprintf(log, "%s%d\n%s\n", Marker, at.UnixMilli(), body)
	return err
}

func (r Recorder) get(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := r.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	return io.ReadAll(resp.Body)
}
