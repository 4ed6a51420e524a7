package nbd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
)

// testClient is a minimal NBD client used to drive the server in tests.
type testClient struct {
	t      *testing.T
	conn   net.Conn
	r      *bufio.Reader
	handle uint64
}

func newTestClient(t *testing.T, conn net.Conn) *testClient {
	return &testClient{t: t, conn: conn, r: bufio.NewReader(conn)}
}

func (c *testClient) write(values ...any) {
	c.t.Helper()
	for _, v := range values {
		if err := binary.Write(c.conn, binary.BigEndian, v); err != nil {
			c.t.Fatalf("client write: %v", err)
		}
	}
}

func (c *testClient) read(values ...any) {
	c.t.Helper()
	for _, v := range values {
		if err := binary.Read(c.r, binary.BigEndian, v); err != nil {
			c.t.Fatalf("client read: %v", err)
		}
	}
}

// greet reads the server greeting and sends client flags.
func (c *testClient) greet(clientFlags uint32) uint16 {
	c.t.Helper()
	var m1, m2 uint64
	var flags uint16
	c.read(&m1, &m2, &flags)
	if m1 != magicInit || m2 != magicOpt {
		c.t.Fatalf("greeting magics %#x %#x", m1, m2)
	}
	c.write(clientFlags)
	return flags
}

func (c *testClient) sendOption(opt uint32, data []byte) {
	c.t.Helper()
	c.write(magicOpt, opt, uint32(len(data)))
	if len(data) == 0 {
		return // net.Pipe blocks an empty Write until the peer reads
	}
	if _, err := c.conn.Write(data); err != nil {
		c.t.Fatalf("client write option data: %v", err)
	}
}

type optReply struct {
	opt, kind uint32
	data      []byte
}

func (c *testClient) readOptReply() optReply {
	c.t.Helper()
	var magic uint64
	var r optReply
	var n uint32
	c.read(&magic, &r.opt, &r.kind, &n)
	if magic != magicOptReply {
		c.t.Fatalf("option reply magic %#x", magic)
	}
	r.data = make([]byte, n)
	if _, err := io.ReadFull(c.r, r.data); err != nil {
		c.t.Fatalf("option reply data: %v", err)
	}
	return r
}

func goPayload(name string, infos ...uint16) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(infos)))
	for _, i := range infos {
		b = binary.BigEndian.AppendUint16(b, i)
	}
	return b
}

// optGo negotiates the export with NBD_OPT_GO and returns size and flags.
func (c *testClient) optGo(name string) (uint64, uint16) {
	c.t.Helper()
	c.sendOption(optGo, goPayload(name, infoBlockSize))
	var size uint64
	var flags uint16
	for {
		r := c.readOptReply()
		switch {
		case r.kind == replyAck:
			return size, flags
		case r.kind == replyInfo && binary.BigEndian.Uint16(r.data) == infoExport:
			size = binary.BigEndian.Uint64(r.data[2:])
			flags = binary.BigEndian.Uint16(r.data[10:])
		case r.kind == replyInfo:
		default:
			c.t.Fatalf("NBD_OPT_GO reply type %#x", r.kind)
		}
	}
}

// request sends one command and returns the reply's error and read data.
func (c *testClient) request(kind, flags uint16, offset uint64, length uint32, payload []byte) (uint32, []byte) {
	c.t.Helper()
	c.handle++
	c.write(magicRequest, flags, kind, c.handle, offset, length)
	if payload != nil {
		if _, err := c.conn.Write(payload); err != nil {
			c.t.Fatalf("client write payload: %v", err)
		}
	}
	var magic, errno uint32
	var handle uint64
	c.read(&magic, &errno, &handle)
	if magic != magicSimpleReply || handle != c.handle {
		c.t.Fatalf("reply magic %#x handle %d, want %#x handle %d", magic, handle, magicSimpleReply, c.handle)
	}
	if kind != cmdRead || errno != 0 {
		return errno, nil
	}
	data := make([]byte, length)
	if _, err := io.ReadFull(c.r, data); err != nil {
		c.t.Fatalf("read data: %v", err)
	}
	return errno, data
}

func (c *testClient) mustOK(kind, flags uint16, offset uint64, length uint32, payload []byte) []byte {
	c.t.Helper()
	errno, data := c.request(kind, flags, offset, length, payload)
	if errno != 0 {
		c.t.Fatalf("%s at %d+%d: errno %d", cmdName(kind), offset, length, errno)
	}
	return data
}

func cmdName(kind uint16) string {
	return fmt.Sprintf("cmd %d", kind)
}
