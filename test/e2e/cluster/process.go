package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one daemon of the control plane with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// startDaemon runs bin with args inside the namespace, logging to
// <logDir>/<name>.log, until Stop.
func (c *Cluster) startDaemon(name, bin string, args ...string) error {
	log, err := os.Create(filepath.Join(c.logDir, name+".log"))
	if err != nil {
		return err
	}
	// Not tied to a context: each daemon lives until Stop, not until the
	// step that started it returns.
	cmd := c.ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); log.Close() }()
	c.daemons = append(c.daemons, p)
	return nil
}

// exited reports an error if the process has already ended.
func (p *process) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		return fmt.Errorf("%s exited: %v (see %s)", p.name, err, p.log.Name())
	default:
		return nil
	}
}

// stop sends SIGTERM, and SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}
