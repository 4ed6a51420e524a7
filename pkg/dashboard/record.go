package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// scrapeMarker starts each scrape in a log, followed by its time in Unix
// milliseconds; the text exposition that follows has no timestamps of its own.
const scrapeMarker = "# scrape "

// Recorder scrapes a Prometheus text endpoint every Interval and appends
// each scrape to a log that Load reads. Scrapes that fail (the plugin is
// restarting, the node rebooting) are skipped, as Prometheus would record a
// gap.
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
				klog.V(2).InfoS("Scrape skipped", "url", r.URL, "err", err)
			}
		}
	}
}

// scrape reads the endpoint whole before writing, so a failed scrape leaves
// no partial entry in the log.
func (r Recorder) scrape(ctx context.Context, log io.Writer) error {
	at := r.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, r.Interval)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := r.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(log, "%s%d\n%s\n", scrapeMarker, at.UnixMilli(), body)
	return err
}
