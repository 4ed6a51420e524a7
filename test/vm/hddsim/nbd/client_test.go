package nbd

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
)

// testClient is a minimal NBD client used to drive the server in tests.
type testClient struct {
	t             *testing.T
	conn          net.Conn
	r             *bufio.Reader
	sent, replied uint64 // handles: commands are numbered from 1
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
	if len(data) > 0 { // net.Pipe blocks an empty Write until the peer reads
		c.write(data)
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
	c.read(r.data)
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

// send sends one command; the server must reply in the order sent (the
// tests' disk serves in arrival order), which reply checks.
func (c *testClient) send(kind, flags uint16, offset uint64, length uint32, payload []byte) {
	c.t.Helper()
	c.sent++
	c.write(magicRequest, flags, kind, c.sent, offset, length)
	if len(payload) > 0 {
		c.write(payload)
	}
}

// reply reads the reply to the oldest unanswered command and returns its
// error and, for a read of length bytes, the data.
func (c *testClient) reply(kind uint16, length uint32) (errno uint32, data []byte) {
	c.t.Helper()
	c.replied++
	var magic uint32
	var handle uint64
	c.read(&magic, &errno, &handle)
	if magic != magicSimpleReply || handle != c.replied {
		c.t.Fatalf("reply magic %#x handle %d, want %#x handle %d", magic, handle, magicSimpleReply, c.replied)
	}
	if kind == cmdRead && errno == 0 {
		data = make([]byte, length)
		c.read(data)
	}
	return errno, data
}

func (c *testClient) mustOK(kind, flags uint16, offset uint64, length uint32, payload []byte) []byte {
	c.t.Helper()
	c.send(kind, flags, offset, length, payload)
	errno, data := c.reply(kind, length)
	if errno != 0 {
		c.t.Fatalf("command %d at %d+%d: errno %d", kind, offset, length, errno)
	}
	return data
}
