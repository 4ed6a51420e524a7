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

// process is one control-plane daemon with its log file.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// startProcess runs bin with args inside the namespace, logging to logDir/name.log.
func startProcess(ns *Netns, logDir, name, bin string, args ...string) (*process, error) {
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	// Not tied to a context: each daemon lives until stop, not until the
	// step that started it returns.
	cmd := ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); log.Close() }()
	return p, nil
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
