package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

// Backend is the byte store behind the export, e.g. a sparse file.
type Backend interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// Scheduler serves a media access, charging the modelled service time. Now
// stamps a request's arrival; Next picks which of the queued accesses (in
// arrival order) is served next; Do returns at its modelled completion.
type Scheduler interface {
	Now() time.Time
	Next(queued []model.Access) int
	Do(arrival time.Time, offset, length int64, io func() error) error
}

// Export is the single disk the server offers, named ExportName.
type Export struct {
	Size    int64
	Backend Backend
	Disk    Scheduler
}

// Server answers NBD clients for one export. Requests on a connection wait
// in a command queue whose order the Scheduler picks; the Scheduler also
// serialises across connections, so the disk behaves like one actuator.
type Server struct {
	export Export
	logger klog.Logger
	wg     sync.WaitGroup
}

// Serve accepts connections until ctx is done or the listener fails, then
// waits for open connections to finish.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("nbd: accept: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			closeOnDone := context.AfterFunc(ctx, func() { conn.Close() })
			defer closeOnDone()
			if err := s.ServeConn(conn); err != nil && ctx.Err() == nil {
				s.logger.Error(err, "NBD connection ended", "export", ExportName)
			}
		}()
	}
}

// ServeConn runs the handshake and then the transmission phase on conn, and
// closes conn when the client disconnects or breaks the protocol.
func (s *Server) ServeConn(conn net.Conn) error {
	defer conn.Close()
	c := &connection{
		r:      bufio.NewReaderSize(conn, 256<<10),
		w:      bufio.NewWriterSize(conn, 256<<10),
		export: &s.export,
		closer: conn,
		logger: s.logger,
	}
	enter, err := c.handshake()
	if err != nil || !enter {
		return err
	}
	s.logger.V(2).Info("NBD client entered transmission", "export", ExportName)
	return c.transmit()
}

type connection struct {
	r      *bufio.Reader
	w      *bufio.Writer
	export *Export
	closer io.Closer
	logger klog.Logger
}

func (c *connection) put(values ...any) error {
	for _, v := range values {
		if err := binary.Write(c.w, binary.BigEndian, v); err != nil {
			return err
		}
	}
	return nil
}

func (c *connection) get(values ...any) error {
	for _, v := range values {
		if err := binary.Read(c.r, binary.BigEndian, v); err != nil {
			return err
		}
	}
	return nil
}
