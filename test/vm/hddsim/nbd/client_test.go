package nbd

import (
	"bufio"
	"encoding/binary"
	"net"
	"testing"
)

// testClient speaks NBD as qemu's client does, to drive the server in tests.
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
		if b, ok := v.([]byte); ok && len(b) == 0 {
			continue // net.Pipe blocks an empty Write until the peer reads
		}
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

// option sends one option and reads its replies up to the first that is
// neither NBD_REP_INFO nor the one wanted, or the ACK; it returns their
// types and payloads.
func (c *testClient) option(opt uint32, data []byte) (kinds []uint32, payloads [][]byte) {
	c.t.Helper()
	c.write(magicOpt, opt, uint32(len(data)), data)
	for {
		var magic uint64
		var gotOpt, kind, n uint32
		c.read(&magic, &gotOpt, &kind, &n)
		if magic != magicOptReply || gotOpt != opt {
			c.t.Fatalf("option %d: reply magic %#x for option %d", opt, magic, gotOpt)
		}
		payload := make([]byte, n)
		c.read(payload)
		kinds, payloads = append(kinds, kind), append(payloads, payload)
		if kind != replyInfo {
			return kinds, payloads
		}
	}
}

// negotiate runs qemu's handshake and checks each answer: fixed newstyle
// with no zeroes, structured replies (which the server must refuse, as
// qemu then sends simple requests only), then NBD_OPT_GO for the export
// asking for block sizes. It returns the export's size.
func (c *testClient) negotiate() uint64 {
	c.t.Helper()
	var m1, m2 uint64
	var flags uint16
	c.read(&m1, &m2, &flags)
	if m1 != magicInit || m2 != magicOpt || flags != flagFixedNewstyle|flagNoZeroes {
		c.t.Fatalf("greeting %#x %#x flags %#x", m1, m2, flags)
	}
	c.write(clientFlagFixedNewstyle | 1<<1) // NBD_FLAG_C_NO_ZEROES
	const optStructuredReply = 8
	if kinds, _ := c.option(optStructuredReply, nil); kinds[0] != replyErrUnsup {
		c.t.Fatalf("NBD_OPT_STRUCTURED_REPLY: reply %#x, want NBD_REP_ERR_UNSUP", kinds[0])
	}
	goData := binary.BigEndian.AppendUint32(nil, uint32(len(ExportName)))
	goData = append(goData, ExportName...)
	goData = binary.BigEndian.AppendUint16(goData, 1)
	goData = binary.BigEndian.AppendUint16(goData, infoBlockSize)
	kinds, payloads := c.option(optGo, goData)
	if len(kinds) != 3 || kinds[2] != replyAck {
		c.t.Fatalf("NBD_OPT_GO: replies %#x, want two NBD_REP_INFO and an ACK", kinds)
	}
	export, sizes := payloads[0], payloads[1]
	if binary.BigEndian.Uint16(export) != infoExport || binary.BigEndian.Uint16(export[10:]) != transmitFlags {
		c.t.Fatalf("NBD_INFO_EXPORT %x: want transmission flags %#x", export, transmitFlags)
	}
	// qemu drops an export whose block sizes it finds inconsistent
	// (minimum and preferred powers of two, minimum <= preferred <= maximum).
	if binary.BigEndian.Uint16(sizes) != infoBlockSize || binary.BigEndian.Uint32(sizes[2:]) != minBlock ||
		binary.BigEndian.Uint32(sizes[6:]) != prefBlock || binary.BigEndian.Uint32(sizes[10:]) != maxPayload {
		c.t.Fatalf("NBD_INFO_BLOCK_SIZE %x: want %d, %d, %d", sizes, minBlock, prefBlock, maxPayload)
	}
	return binary.BigEndian.Uint64(export[2:])
}

// send sends one command; the server must reply in the order sent (the
// tests' disk serves in arrival order), which reply checks.
func (c *testClient) send(kind, flags uint16, offset uint64, length uint32, payload []byte) {
	c.t.Helper()
	c.sent++
	c.write(magicRequest, flags, kind, c.sent, offset, length, payload)
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
