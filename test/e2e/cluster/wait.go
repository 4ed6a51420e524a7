package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Poll calls check every interval until it reports done or an error, the
// node's VM stops, or ctx ends; while the cluster starts, also once the
// guest's kernel reports a soft lockup. No wait here has a deadline of its
// own: ctx carries the caller's, derived from the test's (on a busy machine
// everything takes many times as long as on an idle one). The error says
// what was awaited and what check saw last.
func (c *Cluster) Poll(ctx context.Context, what string, interval time.Duration, check func() (done bool, saw string, err error)) error {
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
		if c.started {
			continue
		}
		if line := softLockup(filepath.Join(c.cfg.WorkDir, "vm", "console.log")); line != "" {
			return fmt.Errorf("%s: %w: %s", what, ErrGuestLockup, line)
		}
	}
}

// ErrGuestLockup: the emulated guest's kernel reported a CPU stuck for tens
// of seconds (seen once under qemu TCG: kubelet stuck on CPU 0 from the first
// minute on, the node never Ready). Such a VM does not recover; starting
// again at once beats waiting out the start's deadline.
var ErrGuestLockup = errors.New("the guest kernel reported a soft lockup")

// softLockup is the console's line reporting a soft lockup, or "".
func softLockup(console string) string {
	data, _ := os.ReadFile(console) // not there yet while the VM boots
	i := bytes.Index(data, []byte("soft lockup"))
	if i < 0 {
		return ""
	}
	line, _, _ := bytes.Cut(data[bytes.LastIndexByte(data[:i], '\n')+1:], []byte("\n"))
	return string(line)
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
