package nbd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

type request struct {
	flags, kind uint16
	handle      uint64
	offset      uint64
	length      uint32
}

// pending is a request moving through the connection's pipeline.
type pending struct {
	req     request
	data    []byte
	arrival time.Time
	errno   uint32
}

// queueDepth bounds requests read ahead of the one in service; qemu's NBD
// client keeps at most 16 in flight.
const queueDepth = 32

// transmit serves requests until the client disconnects. Three stages run
// concurrently so that reading the next request and sending the previous
// reply overlap the modelled service time, as on a drive with a command
// queue; service itself stays one at a time, in the order serveQueued picks.
func (c *connection) transmit() error {
	requests := make(chan pending, queueDepth)
	replies := make(chan pending, queueDepth)
	readErr := make(chan error, 1)
	go func() {
		readErr <- c.readRequests(requests)
		close(requests)
	}()
	go func() {
		c.serveQueued(requests, replies)
		close(replies)
	}()
	writeErr := c.writeReplies(replies)
	if err := <-readErr; err != nil {
		return err
	}
	return writeErr
}

// readRequests decodes requests (with write payloads) until NBD_CMD_DISC or
// end of stream.
func (c *connection) readRequests(out chan<- pending) error {
	for {
		var magic uint32
		var req request
		if err := c.get(&magic, &req.flags, &req.kind, &req.handle, &req.offset, &req.length); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("nbd: reading request: %w", err)
		}
		if magic != magicRequest {
			return fmt.Errorf("nbd: request magic %#x: want %#x", magic, magicRequest)
		}
		if req.kind == cmdDisc {
			return nil
		}
		if req.length > maxPayload {
			return fmt.Errorf("nbd: request length %d: at most %d allowed", req.length, maxPayload)
		}
		p := pending{req: req}
		if req.kind == cmdRead || req.kind == cmdWrite {
			p.data = make([]byte, req.length)
		}
		if req.kind == cmdWrite {
			if _, err := io.ReadFull(c.r, p.data); err != nil {
				return fmt.Errorf("nbd: reading write payload: %w", err)
			}
		}
		p.arrival = c.export.Disk.Now()
		out <- p
	}
}

// serveQueued executes the requests as a drive's command queue does: all
// those read so far wait in the queue, and the disk picks which media
// access goes next (Scheduler.Next).
func (c *connection) serveQueued(in <-chan pending, out chan<- pending) {
	var queue []pending
	for {
		if len(queue) == 0 {
			p, ok := <-in
			if !ok {
				return
			}
			queue = append(queue, p)
		}
		for len(queue) < queueDepth && len(in) > 0 {
			queue = append(queue, <-in)
		}
		i := c.pick(queue)
		p := queue[i]
		queue = slices.Delete(queue, i, i+1)
		p.errno = c.execute(p)
		out <- p
	}
}

// pick is the index in queue of the request to serve next. Only media
// accesses queued before the first other command (a flush: a barrier, as
// a drive's queue treats it) are candidates, and only those that
// overlap no earlier queued request, whose order the client keeps.
func (c *connection) pick(queue []pending) int {
	var candidates []model.Access
	var index []int
	for i, p := range queue {
		if !p.isMediaAccess() {
			break
		}
		if !overlapsAny(p, queue[:i]) {
			candidates = append(candidates, model.Access{Offset: int64(p.req.offset), Length: int64(p.req.length), Arrival: p.arrival})
			index = append(index, i)
		}
	}
	if len(candidates) == 0 {
		return 0 // a barrier first in the queue
	}
	return index[c.export.Disk.Next(candidates)]
}

func (p pending) isMediaAccess() bool {
	return p.req.kind == cmdRead || p.req.kind == cmdWrite || p.req.kind == cmdWriteZeroes
}

func overlapsAny(p pending, earlier []pending) bool {
	start, end := p.req.offset, p.req.offset+uint64(p.req.length)
	for _, e := range earlier {
		if e.req.offset < end && start < e.req.offset+uint64(e.req.length) {
			return true
		}
	}
	return false
}

// writeReplies sends simple replies in completion order, flushing when no
// further reply is ready. After a write error it closes the connection (to
// stop the reader) and drains the pipeline.
func (c *connection) writeReplies(in <-chan pending) error {
	var failed error
	for p := range in {
		if failed != nil {
			continue
		}
		failed = c.writeReply(p)
		if failed == nil && len(in) == 0 {
			failed = c.w.Flush()
		}
		if failed != nil {
			c.closer.Close()
		}
	}
	return failed
}

func (c *connection) writeReply(p pending) error {
	if err := c.put(magicSimpleReply, p.errno, p.req.handle); err != nil {
		return err
	}
	if p.req.kind == cmdRead && p.errno == 0 {
		_, err := c.w.Write(p.data)
		return err
	}
	return nil
}

// execute performs one request on the media and returns its NBD errno.
func (c *connection) execute(p pending) uint32 {
	req, data := p.req, p.data
	off, n := int64(req.offset), int64(req.length)
	c.logger.V(5).Info("NBD request", "kind", req.kind, "offset", off, "length", n, "flags", req.flags)
	inRange := req.offset <= uint64(c.export.Size) && n <= c.export.Size-off
	switch req.kind {
	case cmdRead:
		if !inRange {
			return errInvalid
		}
		return errnoOf(c.export.Disk.Do(p.arrival, off, n, func() error {
			_, err := c.export.Backend.ReadAt(data, off)
			return err
		}))
	case cmdWrite, cmdWriteZeroes:
		if !inRange {
			return errNoSpace
		}
		return errnoOf(c.export.Disk.Do(p.arrival, off, n, func() error { return c.write(req, data) }))
	case cmdFlush:
		return errnoOf(c.export.Backend.Sync())
	default: // trim and the rest are not offered (transmitFlags)
		return errInvalid
	}
}

// write stores a write's payload, or zeroes for NBD_CMD_WRITE_ZEROES: qemu
// sets NO_HOLE on every one, as its -blockdev does not unmap.
func (c *connection) write(req request, data []byte) error {
	if req.kind == cmdWriteZeroes {
		data = make([]byte, req.length)
	}
	_, err := c.export.Backend.WriteAt(data, int64(req.offset))
	if err == nil && req.flags&cmdFlagFUA != 0 {
		err = c.export.Backend.Sync()
	}
	return err
}

func errnoOf(err error) uint32 {
	if err == nil {
		return 0
	}
	return errIO
}
