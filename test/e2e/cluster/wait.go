package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// poll calls check every interval until it reports done or an error, the
// node's VM stops, or ctx ends. No wait here has a deadline of its own: ctx
// carries the caller's, derived from the test's (a start on a busy machine
// takes many times as long as on an idle one). The error says what was
// awaited and what check saw last.
func (c *Cluster) poll(ctx context.Context, what string, interval time.Duration, check func() (done bool, saw string, err error)) error {
	start := time.Now()
	last := "nothing yet"
	var vmDone <-chan struct{} // nil (never ready) until the VM is started
	if c.boot != nil {
		vmDone = c.boot.Done()
	}
	for {
		done, saw, err := check()
		switch {
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case done:
			return nil
		}
		if ctx.Err() == nil { // a look that ctx cut short saw nothing worth quoting
			last = saw
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %v (%v); last seen: %s", what, time.Since(start).Round(time.Second), ctx.Err(), last)
		case <-vmDone:
			return fmt.Errorf("%s: the node's VM stopped after %v; last seen: %s", what, time.Since(start).Round(time.Second), last)
		case <-time.After(interval):
		}
	}
}

// lastLines is the end of a log file, for error messages.
func lastLines(path string, n int) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n"), nil
}
