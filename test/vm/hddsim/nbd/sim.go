package nbd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

// SimConfig is everything needed to serve a simulated HDD on a unix socket.
// The zero value of each model field means "use the model's default".
type SimConfig struct {
	Socket     string
	File       string
	ExportName string
	Size       int64
	// Scale multiplies seek and rotation times (1 = defaults).
	Scale        float64
	TransferRate float64
	Settle       time.Duration
	FullStroke   time.Duration
	RPM          float64
	TrackBytes   int64
}

// RegisterFlags binds the config to command-line flags.
func (c *SimConfig) RegisterFlags(fs *flag.FlagSet) {
	d := model.Defaults(1)
	fs.StringVar(&c.Socket, "socket", "", "unix socket path to listen on (required)")
	fs.StringVar(&c.File, "file", "", "sparse backing file; created if missing, contents kept (required)")
	fs.StringVar(&c.ExportName, "export", "hdd", "NBD export name")
	fs.Func("size", "disk size, e.g. 4Gi (required)", func(s string) error {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return err
		}
		c.Size = q.Value()
		return nil
	})
	fs.Float64Var(&c.Scale, "scale", 1, "multiply seek and rotation times; >1 makes random I/O slower")
	fs.Float64Var(&c.TransferRate, "transfer-rate", d.TransferRate, "media transfer rate, bytes/s")
	fs.DurationVar(&c.Settle, "settle", d.Settle, "shortest seek (track to track plus settle)")
	fs.DurationVar(&c.FullStroke, "full-stroke", d.FullStroke, "seek across the whole disk")
	fs.Float64Var(&c.RPM, "rpm", d.RPM, "spindle speed; average rotational latency is half a revolution (0 disables)")
	fs.Int64Var(&c.TrackBytes, "track-bytes", d.TrackBytes, "a request this close ahead of the head waits for the platter instead of seeking")
}

// Params turns the config into model parameters.
func (c SimConfig) Params() model.Params {
	p := model.Defaults(c.Size)
	if c.TransferRate != 0 {
		p.TransferRate = c.TransferRate
	}
	if c.Settle != 0 {
		p.Settle = c.Settle
	}
	if c.FullStroke != 0 {
		p.FullStroke = c.FullStroke
	}
	if c.RPM != 0 {
		p.RPM = c.RPM
	}
	if c.TrackBytes != 0 {
		p.TrackBytes = c.TrackBytes
	}
	if c.Scale != 0 && c.Scale != 1 {
		p = p.Scale(c.Scale)
	}
	return p
}

func (c SimConfig) validate() error {
	switch {
	case c.Socket == "":
		return errors.New("hddsim: Socket (-socket) is empty: give a unix socket path")
	case c.File == "":
		return errors.New("hddsim: File (-file) is empty: give a backing file path")
	case c.Size <= 0 || c.Size%512 != 0:
		return fmt.Errorf("hddsim: Size (-size) %d: must be a positive multiple of 512 bytes", c.Size)
	case c.Scale < 0:
		return fmt.Errorf("hddsim: Scale (-scale) %v: must be > 0", c.Scale)
	}
	return c.Params().Validate()
}

// Sim is a running simulated HDD.
type Sim struct {
	Actuator *model.Actuator
	done     chan error
	file     *FileBackend
}

// StartSim opens the backing file, listens on the socket and serves in the
// background until ctx is done. The socket is removed when serving ends.
func StartSim(ctx context.Context, cfg SimConfig, clock model.Clock, logger klog.Logger) (*Sim, error) {
	if cfg.ExportName == "" {
		cfg.ExportName = "hdd"
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	act, err := model.NewActuator(cfg.Params(), clock)
	if err != nil {
		return nil, err
	}
	file, err := OpenFile(cfg.File, cfg.Size)
	if err != nil {
		return nil, err
	}
	srv, err := NewServer(Export{Name: cfg.ExportName, Size: cfg.Size, Backend: file, Disk: act, Rotational: true}, logger)
	if err != nil {
		file.Close()
		return nil, err
	}
	_ = os.Remove(cfg.Socket) // a stale socket from a killed run blocks Listen
	l, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("hddsim: listening on %s: %w", cfg.Socket, err)
	}
	sim := &Sim{Actuator: act, done: make(chan error, 1), file: file}
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
