package nbd

import (
	"errors"
	"fmt"
	"io"
)

type request struct {
	flags, kind uint16
	handle      uint64
	offset      uint64
	length      uint32
}

// transmit serves requests until the client disconnects. Each request is
// completed and answered before the next is read, in arrival order.
func (c *connection) transmit() error {
	buf := make([]byte, 0, 1<<20)
	for {
		var magic uint32
		var req request
		if err := c.get(&magic, &req.flags, &req.kind, &req.handle, &req.offset, &req.length); err != nil {
			if errors.Is(err, io.EOF) {
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
		if cap(buf) < int(req.length) {
			buf = make([]byte, req.length)
		}
		data := buf[:req.length]
		if err := c.serve(req, data); err != nil {
			return err
		}
	}
}

// serve reads a write payload if any, performs the request and replies.
// Only a broken connection is returned as an error; failed I/O is an errno
// in the reply.
func (c *connection) serve(req request, data []byte) error {
	if req.kind == cmdWrite {
		if _, err := io.ReadFull(c.r, data); err != nil {
			return fmt.Errorf("nbd: reading write payload: %w", err)
		}
	}
	errno := c.execute(req, data)
	if err := c.put(magicSimpleReply, errno, req.handle); err != nil {
		return err
	}
	if req.kind == cmdRead && errno == 0 {
		if _, err := c.w.Write(data); err != nil {
			return err
		}
	}
	return c.w.Flush()
}

func (c *connection) execute(req request, data []byte) uint32 {
	off, n := int64(req.offset), int64(req.length)
	inRange := req.offset <= uint64(c.export.Size) && n <= c.export.Size-off
	switch req.kind {
	case cmdRead:
		if !inRange {
			return errInvalid
		}
		return errnoOf(c.export.Disk.Do(off, n, func() error {
			_, err := c.export.Backend.ReadAt(data, off)
			return err
		}))
	case cmdWrite, cmdWriteZeroes:
		if !inRange {
			return errNoSpace
		}
		return errnoOf(c.export.Disk.Do(off, n, func() error { return c.write(req, data) }))
	case cmdFlush:
		return errnoOf(c.export.Backend.Sync())
	case cmdTrim:
		if !inRange {
			return errInvalid
		}
		// An HDD has no trim; deallocating the sparse backing costs no media time.
		return errnoOf(c.export.Backend.PunchHole(off, n))
	default:
		return errInvalid
	}
}

func (c *connection) write(req request, data []byte) error {
	off, n := int64(req.offset), int64(req.length)
	var err error
	switch {
	case req.kind == cmdWrite:
		_, err = c.export.Backend.WriteAt(data, off)
	case req.flags&cmdFlagNoHole != 0:
		clear(data)
		_, err = c.export.Backend.WriteAt(data, off)
	default:
		err = c.export.Backend.PunchHole(off, n)
	}
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
