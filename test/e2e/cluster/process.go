package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// daemon is one process of the control plane.
type daemon struct {
	name, log string
	// stop sends SIGTERM, and SIGKILL 15 seconds later; done closes once the
	// process has ended, with err.
	stop context.CancelFunc
	done chan struct{}
	err  error
}

// startDaemon runs bin with args inside the namespace, logging to
// <logDir>/<name>.log, until Stop.
func (c *Cluster) startDaemon(name, bin string, args ...string) error {
	log, err := os.Create(filepath.Join(c.logDir, name+".log"))
	if err != nil {
		return err
	}
	// Its own context: each daemon lives until Stop, not until the step that
	// started it returns.
	ctx, stop := context.WithCancel(context.Background())
	cmd := c.ns.Command(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Start(); err != nil {
		stop()
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, log: log.Name(), stop: stop, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); log.Close(); close(d.done) }()
	c.daemons = append(c.daemons, d)
	return nil
}

// exited reports an error if the process has already ended.
func (d *daemon) exited() error {
	select {
	case <-d.done:
		return fmt.Errorf("%s exited: %v (see %s)", d.name, d.err, d.log)
	default:
		return nil
	}
}
