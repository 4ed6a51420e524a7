package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

const testSize = 1 << 20

// badOffset is where reads fail, as on a bad sector.
const badOffset = testSize - 4096

// fakeDisk is an in-memory Backend and a Scheduler serving in arrival order;
// it logs what the server asks of either. Only the connection's serving
// goroutine uses it, and the tests read it once that has ended.
type fakeDisk struct {
	data []byte
	log  []string
}

func (d *fakeDisk) record(format string, args ...any) {
	d.log = append(d.log, fmt.Sprintf(format, args...))
}

func (d *fakeDisk) ReadAt(p []byte, off int64) (int, error) {
	d.record("read %d+%d", off, len(p))
	if off == badOffset {
		return 0, errors.New("injected")
	}
	return copy(p, d.data[off:]), nil
}

func (d *fakeDisk) WriteAt(p []byte, off int64) (int, error) {
	d.record("write %d+%d", off, len(p))
	return copy(d.data[off:], p), nil
}

func (d *fakeDisk) Sync() error             { d.record("sync"); return nil }
func (d *fakeDisk) Now() time.Time          { return time.Unix(0, 0) }
func (d *fakeDisk) Next([]model.Access) int { return 0 }
func (d *fakeDisk) Do(_ time.Time, off, n int64, io func() error) error {
	d.record("media %d+%d", off, n)
	return io()
}

// client is the other end of a pipe to ServeConn, speaking NBD as qemu's
// client does.
type client struct {
	t    *testing.T
	conn net.Conn
}

// startPipe serves a fresh in-memory export on one end of a pipe. wait
// returns what ServeConn returned once the connection has ended.
func startPipe(t *testing.T) (c client, d *fakeDisk, wait func() error) {
	d = &fakeDisk{data: make([]byte, testSize)}
	srv := &Server{export: Export{Size: testSize, Backend: d, Disk: d}, logger: klog.Background()}
	serverSide, clientSide := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(serverSide) }()
	wait = sync.OnceValue(func() error { return <-done })
	t.Cleanup(func() { clientSide.Close(); wait() })
	return client{t, clientSide}, d, wait
}

func (c client) send(values ...any) {
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

func (c client) recv(values ...any) {
	c.t.Helper()
	for _, v := range values {
		if err := binary.Read(c.conn, binary.BigEndian, v); err != nil {
			c.t.Fatalf("client read: %v", err)
		}
	}
}

// greet reads the server's greeting and answers it as qemu does.
func (c client) greet() {
	c.t.Helper()
	var greeting struct {
		Init, Opt uint64
		Flags     uint16
	}
	c.recv(&greeting)
	if greeting.Init != magicInit || greeting.Opt != magicOpt || greeting.Flags != flagFixedNewstyle|flagNoZeroes {
		c.t.Fatalf("greeting %+v: want fixed newstyle without zeroes", greeting)
	}
	c.send(clientFlagFixedNewstyle | 1<<1) // NBD_FLAG_C_NO_ZEROES
}

// option sends one option and returns its replies' types and payloads, up
// to the first that is not NBD_REP_INFO.
func (c client) option(opt uint32, data []byte) (kinds []uint32, payloads [][]byte) {
	c.t.Helper()
	c.send(magicOpt, opt, uint32(len(data)), data)
	for {
		var h struct {
			Magic           uint64
			Opt, Kind, Size uint32
		}
		c.recv(&h)
		if h.Magic != magicOptReply || h.Opt != opt {
			c.t.Fatalf("option %d: reply %+v", opt, h)
		}
		payload := make([]byte, h.Size)
		c.recv(payload)
		kinds, payloads = append(kinds, h.Kind), append(payloads, payload)
		if h.Kind != replyInfo {
			return kinds, payloads
		}
	}
}

// negotiate runs qemu's handshake and checks each answer: structured
// replies refused (qemu then sends simple requests only), then NBD_OPT_GO
// for the export, asking for block sizes.
func (c client) negotiate() {
	c.t.Helper()
	c.greet()
	const optStructuredReply = 8
	if kinds, _ := c.option(optStructuredReply, nil); kinds[0] != replyErrUnsup {
		c.t.Fatalf("NBD_OPT_STRUCTURED_REPLY: reply %#x, want NBD_REP_ERR_UNSUP", kinds[0])
	}
	// Export name length and name, then one info request: NBD_INFO_BLOCK_SIZE.
	kinds, payloads := c.option(optGo, []byte("\x00\x00\x00\x03hdd\x00\x01\x00\x03"))
	got := fmt.Sprintf("%#x %x", kinds, payloads)
	// NBD_INFO_EXPORT: size and flags (flush, FUA, rotational, write-zeroes;
	// no trim, as qemu's -blockdev sends none); NBD_INFO_BLOCK_SIZE: 1, 4096
	// and 32 MiB, as qemu drops an export whose sizes it finds inconsistent;
	// then the ACK.
	want := "[0x3 0x3 0x1] [" + "0000" + "0000000000100000" + "005d " + "0003" + "00000001" + "00001000" + "02000000" + " ]"
	if got != want {
		c.t.Fatalf("NBD_OPT_GO: replies %s, want %s", got, want)
	}
}

// TestHandshake negotiates as qemu does on one connection and aborts on a
// second, which must end without error.
func TestHandshake(t *testing.T) {
	c, _, _ := startPipe(t)
	c.negotiate()

	c, _, wait := startPipe(t)
	c.greet()
	if kinds, _ := c.option(optAbort, nil); kinds[0] != replyAck {
		t.Fatalf("NBD_OPT_ABORT: reply %#x, want ACK", kinds[0])
	}
	if err := wait(); err != nil {
		t.Fatalf("after NBD_OPT_ABORT the server ended with %v", err)
	}
}

// step is one request, the reply's errno, and what the server must ask of the
// backend and the disk model for it, as fakeDisk logs it.
type step struct {
	kind, flags uint16
	offset      uint64
	write, read []byte // a write's payload; what a read must return
	length      uint32 // when neither is given
	errno       uint32
	log         string
}

// TestRequests sends every request at once, as qemu keeps several in
// flight, then NBD_CMD_DISC, and reads the replies: each must come for its
// handle with its data, and the server must end cleanly.
func TestRequests(t *testing.T) {
	text, ones, zeroes := bytes.Repeat([]byte("ssdcache"), 512), bytes.Repeat([]byte{1}, 4096), make([]byte, 4096)
	steps := []step{
		{kind: cmdWrite, offset: 8192, write: text, log: "media 8192+4096, write 8192+4096"},
		{kind: cmdWrite, flags: cmdFlagFUA, write: ones, log: "media 0+4096, write 0+4096, sync"},
		{kind: cmdRead, offset: 8192, read: text, log: "media 8192+4096, read 8192+4096"},
		{kind: cmdRead, read: ones, log: "media 0+4096, read 0+4096"},
		{kind: cmdFlush, log: "sync"},
		{kind: cmdWriteZeroes, length: 4096, log: "media 0+4096, write 0+4096"},
		{kind: cmdRead, read: zeroes, log: "media 0+4096, read 0+4096"},
		// Errors are replies, not disconnects.
		{kind: cmdRead, offset: testSize - 512, length: 4096, errno: errInvalid},
		{kind: cmdWrite, offset: testSize, write: zeroes[:512], errno: errNoSpace},
		{kind: 4, length: 512, errno: errInvalid}, // trim: not offered
		{kind: cmdRead, offset: badOffset, length: 512, errno: errIO, log: fmt.Sprintf("media %d+512, read %[1]d+512", badOffset)},
	}
	c, d, wait := startPipe(t)
	c.negotiate()
	var want []string
	for i, s := range steps {
		n := s.length + uint32(len(s.write)+len(s.read))
		c.send(magicRequest, s.flags, s.kind, uint64(i), s.offset, n, s.write)
		if s.log != "" {
			want = append(want, s.log)
		}
	}
	c.send(magicRequest, uint16(0), cmdDisc, uint64(0), uint64(0), uint32(0))
	for i, s := range steps {
		var reply struct {
			Magic, Errno uint32
			Handle       uint64
		}
		c.recv(&reply)
		if reply.Magic != magicSimpleReply || reply.Handle != uint64(i) || reply.Errno != s.errno {
			t.Fatalf("step %d: reply %+v, want errno %d", i, reply, s.errno)
		}
		if s.read != nil && s.errno == 0 {
			got := make([]byte, len(s.read))
			if c.recv(got); !bytes.Equal(got, s.read) {
				t.Errorf("step %d: read %.8q, want %.8q", i, got, s.read)
			}
		}
	}
	if err := wait(); err != nil {
		t.Fatalf("after NBD_CMD_DISC the server ended with %v", err)
	}
	if got, want := strings.Join(d.log, ", "), strings.Join(want, ", "); got != want {
		t.Errorf("the server did\n  %s\nwant\n  %s", got, want)
	}
}

// farthestDisk picks the last candidate, so a test sees which ones pick offered.
type farthestDisk struct {
	fakeDisk
	offered []model.Access
}

func (d *farthestDisk) Next(queued []model.Access) int {
	d.offered = queued
	return len(queued) - 1
}

func TestQueueReordersOnlyIndependentMediaAccesses(t *testing.T) {
	read := func(off uint64, n uint32) pending {
		return pending{req: request{kind: cmdRead, offset: off, length: n}}
	}
	write := func(off uint64, n uint32) pending {
		return pending{req: request{kind: cmdWrite, offset: off, length: n}}
	}
	flush := pending{req: request{kind: cmdFlush}}
	for _, tc := range []struct {
		name  string
		queue []pending
		want  int
		// offered are the offsets the disk may choose among.
		offered []int64
	}{
		{"reads", []pending{read(0, 4096), read(8192, 4096), read(4096, 4096)}, 2, []int64{0, 8192, 4096}},
		{"flush is a barrier", []pending{read(0, 4096), flush, read(8192, 4096)}, 0, []int64{0}},
		{"flush first", []pending{flush, read(0, 4096)}, 0, nil},
		{"overlap keeps order", []pending{write(0, 8192), read(4096, 4096)}, 0, []int64{0}},
	} {
		disk := &farthestDisk{}
		c := &connection{export: &Export{Disk: disk}}
		if got := c.pick(tc.queue); got != tc.want {
			t.Errorf("%s: pick() = %d, want %d", tc.name, got, tc.want)
		}
		var offered []int64
		for _, a := range disk.offered {
			offered = append(offered, a.Offset)
		}
		if !slices.Equal(offered, tc.offered) {
			t.Errorf("%s: the disk was offered offsets %v, want %v", tc.name, offered, tc.offered)
		}
	}
}
