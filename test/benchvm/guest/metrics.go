package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/dashboard/scrapelog"
	"github.com/ssdcache/ssdcache/test/benchvm/parts"
	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// metricsInterval is how often the node's /metrics is scraped: half its
// sample interval, as Prometheus is usually set up against a 10 s exporter.
const metricsInterval = 5 * time.Second

// recordMetrics scrapes ssdcache-node's /metrics into the share's metrics
// log until stop is called, for the host to draw the chart's dashboard over
// the whole run; the boot after a reboot appends to the first boot's log.
func recordMetrics(ctx context.Context, o options) (stop func(), err error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if !o.AfterReboot {
		flags |= os.O_TRUNC
	}
	log, err := os.OpenFile(filepath.Join(o.OutputDir, parts.MetricsLog), flags, 0o644)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	rec := scrapelog.Recorder{URL: "http://" + guest.MetricsAddress + "/metrics", Interval: metricsInterval, Client: &http.Client{}, Clock: clock.RealClock{}}
	go func() {
		defer close(done)
		_ = rec.Run(ctx, log) // ends with ctx, without error
	}()
	return func() {
		cancel()
		<-done
		_ = log.Close()
	}, nil
}
