package nbd

import (
	"context"
	"fmt"
	"net"
	"os"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

// ExportName is the simulated HDD's export, as qemu's -blockdev names it.
const ExportName = "hdd"

// SimConfig is a simulated HDD served on a unix socket.
type SimConfig struct {
	// Socket is the unix socket to listen on.
	Socket string
	// File is the sparse backing file, created if missing; contents are kept.
	File string
	// Model is the drive; its Capacity is the disk size (package vm checks
	// it is whole MiB).
	Model model.Params
}

// Sim is a running simulated HDD.
type Sim struct {
	Actuator *model.Actuator
	done     chan error
}

// StartSim opens the backing file, listens on the socket and serves in the
// background until ctx is done. The socket is removed when serving ends.
func StartSim(ctx context.Context, cfg SimConfig, clock model.Clock, logger klog.Logger) (*Sim, error) {
	file, err := OpenFile(cfg.File, cfg.Model.Capacity)
	if err != nil {
		return nil, fmt.Errorf("hddsim: backing file: %w", err)
	}
	act := model.NewActuator(cfg.Model, clock)
	srv := &Server{export: Export{Size: cfg.Model.Capacity, Backend: file, Disk: act}, logger: logger}
	_ = os.Remove(cfg.Socket) // a stale socket from a killed run blocks Listen
	l, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("hddsim: listening on %s: %w", cfg.Socket, err)
	}
	sim := &Sim{Actuator: act, done: make(chan error, 1)}
	go func() {
		err := srv.Serve(ctx, l)
		os.Remove(cfg.Socket)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		sim.done <- err
	}()
	return sim, nil
}

// Wait blocks until serving has stopped and returns its error.
func (s *Sim) Wait() error { return <-s.done }

// OpenFile opens (creating if needed) a sparse file of exactly size bytes.
// An existing file keeps its contents, so a second boot sees the same disk;
// one larger than size is an error, not cut.
func OpenFile(path string, size int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && st.Size() > size {
		err = fmt.Errorf("%s is %d bytes, larger than %d: refusing to cut it", path, st.Size(), size)
	}
	if err == nil {
		err = f.Truncate(size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
