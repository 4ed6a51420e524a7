package nbd

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

// memBackend is an in-memory Backend that records syncs and punched holes.
type memBackend struct {
	mu     sync.Mutex
	data   []byte
	syncs  int
	holes  [][2]int64
	failIO bool
}

func (m *memBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failIO {
		return 0, errors.New("injected")
	}
	return copy(p, m.data[off:]), nil
}

func (m *memBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(m.data[off:], p), nil
}

func (m *memBackend) Sync() error { m.mu.Lock(); m.syncs++; m.mu.Unlock(); return nil }

func (m *memBackend) PunchHole(off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.data[off : off+n])
	m.holes = append(m.holes, [2]int64{off, n})
	return nil
}

// recordingDisk is a Scheduler that records the media accesses it serves.
type recordingDisk struct{ accesses [][2]int64 }

func (d *recordingDisk) Now() time.Time { return time.Unix(0, 0) }

// Next serves in arrival order, so the tests' replies come in request order.
func (d *recordingDisk) Next([]model.Access) int { return 0 }

func (d *recordingDisk) Do(_ time.Time, off, n int64, io func() error) error {
	d.accesses = append(d.accesses, [2]int64{off, n})
	return io()
}

const testSize = 1 << 20

func startPipe(t *testing.T) (*testClient, *memBackend, *recordingDisk) {
	t.Helper()
	be := &memBackend{data: make([]byte, testSize)}
	disk := &recordingDisk{}
	srv, err := NewServer(Export{Name: "hdd", Size: testSize, Backend: be, Disk: disk, Rotational: true}, klog.Background())
	if err != nil {
		t.Fatal(err)
	}
	serverSide, clientSide := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(serverSide) }()
	t.Cleanup(func() {
		clientSide.Close()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Logf("server ended: %v", err)
		}
	})
	return newTestClient(t, clientSide), be, disk
}

func TestHandshakeGoAndReadWrite(t *testing.T) {
	c, be, disk := startPipe(t)
	if flags := c.greet(clientFlagFixedNewstyle | clientFlagNoZeroes); flags&flagFixedNewstyle == 0 {
		t.Fatalf("server flags %#x lack fixed newstyle", flags)
	}
	size, flags := c.optGo("hdd")
	if size != testSize {
		t.Fatalf("export size %d, want %d", size, testSize)
	}
	for _, f := range []uint16{transmitHasFlags, transmitSendFlush, transmitSendFUA, transmitSendTrim, transmitRotational} {
		if flags&f == 0 {
			t.Errorf("transmission flags %#x lack %#x", flags, f)
		}
	}
	payload := bytes.Repeat([]byte("ssdcache"), 512)
	c.mustOK(cmdWrite, 0, 8192, uint32(len(payload)), payload)
	if got := c.mustOK(cmdRead, 0, 8192, uint32(len(payload)), nil); !bytes.Equal(got, payload) {
		t.Fatal("read back differs from write")
	}
	if !bytes.Equal(be.data[8192:8192+len(payload)], payload) {
		t.Fatal("backend does not hold the written data")
	}
	want := [][2]int64{{8192, 4096}, {8192, 4096}}
	if len(disk.accesses) != 2 || disk.accesses[0] != want[0] || disk.accesses[1] != want[1] {
		t.Fatalf("disk accesses %v, want %v", disk.accesses, want)
	}
}

func TestFlushFUATrimAndWriteZeroes(t *testing.T) {
	c, be, _ := startPipe(t)
	c.greet(clientFlagFixedNewstyle)
	c.optGo("hdd")
	ones := bytes.Repeat([]byte{1}, 4096)
	c.mustOK(cmdWrite, cmdFlagFUA, 0, 4096, ones)
	if be.syncs != 1 {
		t.Fatalf("FUA write caused %d syncs, want 1", be.syncs)
	}
	c.mustOK(cmdFlush, 0, 0, 0, nil)
	if be.syncs != 2 {
		t.Fatalf("flush caused %d syncs total, want 2", be.syncs)
	}
	c.mustOK(cmdTrim, 0, 0, 4096, nil)
	if got := c.mustOK(cmdRead, 0, 0, 4096, nil); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("trimmed range does not read as zeroes")
	}
	c.mustOK(cmdWrite, 0, 4096, 4096, ones)
	c.mustOK(cmdWriteZeroes, cmdFlagNoHole, 4096, 4096, nil)
	if got := c.mustOK(cmdRead, 0, 4096, 4096, nil); !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("write-zeroes range does not read as zeroes")
	}
	if len(be.holes) != 1 {
		t.Fatalf("holes %v: NO_HOLE write-zeroes must not punch", be.holes)
	}
}

func TestErrorsAreRepliesNotDisconnects(t *testing.T) {
	c, be, _ := startPipe(t)
	c.greet(clientFlagFixedNewstyle)
	c.optGo("")
	if errno, _ := c.request(cmdRead, 0, testSize-512, 4096, nil); errno != errInvalid {
		t.Fatalf("read past end: errno %d, want EINVAL", errno)
	}
	if errno, _ := c.request(cmdWrite, 0, testSize, 512, make([]byte, 512)); errno != errNoSpace {
		t.Fatalf("write past end: errno %d, want ENOSPC", errno)
	}
	if errno, _ := c.request(5, 0, 0, 512, nil); errno != errInvalid {
		t.Fatalf("unsupported command: errno %d, want EINVAL", errno)
	}
	be.failIO = true
	if errno, _ := c.request(cmdRead, 0, 0, 512, nil); errno != errIO {
		t.Fatalf("failed backend read: errno %d, want EIO", errno)
	}
	be.failIO = false
	c.mustOK(cmdRead, 0, 0, 512, nil) // the connection is still usable
	c.write(magicRequest, uint16(0), cmdDisc, uint64(99), uint64(0), uint32(0))
}

func TestOptionNegotiation(t *testing.T) {
	c, _, _ := startPipe(t)
	c.greet(clientFlagFixedNewstyle)
	c.sendOption(optStructuredReply, nil)
	if r := c.readOptReply(); r.kind != replyErrUnsup {
		t.Fatalf("structured reply: %#x, want NBD_REP_ERR_UNSUP", r.kind)
	}
	c.sendOption(optList, nil)
	if r := c.readOptReply(); r.kind != replyServer || string(r.data[4:]) != "hdd" {
		t.Fatalf("list: %#x %q", r.kind, r.data)
	}
	if r := c.readOptReply(); r.kind != replyAck {
		t.Fatalf("list end: %#x", r.kind)
	}
	c.sendOption(optGo, goPayload("nope"))
	if r := c.readOptReply(); r.kind != replyErrUnknown {
		t.Fatalf("unknown export: %#x, want NBD_REP_ERR_UNKNOWN", r.kind)
	}
	c.sendOption(optInfo, goPayload("hdd"))
	for r := c.readOptReply(); r.kind != replyAck; r = c.readOptReply() {
		if r.kind != replyInfo {
			t.Fatalf("info reply %#x", r.kind)
		}
	}
	c.sendOption(optGo, []byte{0, 0, 0, 9}) // truncated payload
	if r := c.readOptReply(); r.kind != replyErrInvalid {
		t.Fatalf("bad GO payload: %#x, want NBD_REP_ERR_INVALID", r.kind)
	}
	size, _ := c.optGo("hdd")
	if size != testSize {
		t.Fatalf("size %d after negotiation", size)
	}
	c.mustOK(cmdRead, 0, 0, 512, nil)
}

func TestExportNameOldStyleOption(t *testing.T) {
	c, _, _ := startPipe(t)
	c.greet(clientFlagFixedNewstyle) // no NO_ZEROES: expect 124 bytes of padding
	c.sendOption(optExportName, []byte("hdd"))
	var size uint64
	var flags uint16
	c.read(&size, &flags)
	pad := make([]byte, handshakeNZ)
	c.read(pad)
	if size != testSize || flags&transmitHasFlags == 0 || !bytes.Equal(pad, make([]byte, handshakeNZ)) {
		t.Fatalf("export name reply: size %d flags %#x", size, flags)
	}
	c.mustOK(cmdRead, 0, 0, 512, nil)
}

func TestRejectsClientWithoutFixedNewstyle(t *testing.T) {
	be := &memBackend{data: make([]byte, testSize)}
	srv, _ := NewServer(Export{Name: "hdd", Size: testSize, Backend: be, Disk: &recordingDisk{}}, klog.Background())
	s, cl := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(s) }()
	c := newTestClient(t, cl)
	c.greet(0)
	if err := <-done; err == nil {
		t.Fatal("server accepted a client without fixed newstyle")
	}
	cl.Close()
}

func TestNewServerNamesBadField(t *testing.T) {
	_, err := NewServer(Export{Name: "hdd", Size: 1000, Backend: &memBackend{}, Disk: &recordingDisk{}}, klog.Background())
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("Size=1000")) {
		t.Fatalf("NewServer() = %v, want error naming Size=1000", err)
	}
}

// StartSim end to end over a real unix socket and sparse file, with the
// model's clock faked so the test does not depend on timing.
func TestSimOverUnixSocketKeepsDataAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := SimConfig{Socket: filepath.Join(dir, "hdd.sock"), File: filepath.Join(dir, "hdd.img"), Size: 64 << 20}
	payload := bytes.Repeat([]byte{0xa5}, 1<<20)
	for boot := 0; boot < 2; boot++ {
		ctx, cancel := context.WithCancel(context.Background())
		clock := &countingClock{}
		sim, err := StartSim(ctx, cfg, clock, klog.Background())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("unix", cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		c := newTestClient(t, conn)
		c.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)
		c.optGo("hdd")
		if boot == 0 {
			c.mustOK(cmdWrite, 0, 32<<20, 1<<20, payload)
			c.mustOK(cmdFlush, 0, 0, 0, nil)
		} else if got := c.mustOK(cmdRead, 0, 32<<20, 1<<20, nil); !bytes.Equal(got, payload) {
			t.Fatal("data written before restart is gone")
		}
		if ops, busy := sim.Actuator.Stats(); ops != 1 || busy <= 0 || clock.slept <= 0 {
			t.Fatalf("boot %d: actuator ops %d busy %v slept %v", boot, ops, busy, clock.slept)
		}
		conn.Close()
		cancel()
		if err := sim.Wait(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(cfg.Socket); !os.IsNotExist(err) {
			t.Fatalf("socket left behind: %v", err)
		}
	}
	if st, _ := os.Stat(cfg.File); st.Size() != cfg.Size {
		t.Fatalf("backing file size %d, want %d", st.Size(), cfg.Size)
	}
}

func TestSimConfigValidationNamesFlag(t *testing.T) {
	_, err := StartSim(context.Background(), SimConfig{Socket: "s", File: "f", Size: 1000}, &countingClock{}, klog.Background())
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("-size")) {
		t.Fatalf("StartSim() = %v, want error naming -size", err)
	}
}

type countingClock struct {
	mu    sync.Mutex
	slept time.Duration
}

func (c *countingClock) Now() time.Time { return time.Unix(0, 0) }
func (c *countingClock) Sleep(d time.Duration) {
	c.mu.Lock()
	c.slept += d
	c.mu.Unlock()
}

var _ model.Clock = (*countingClock)(nil)

// qemu keeps several requests in flight; replies must come back for each
// handle, in service order, with the right data.
func TestPipelinedRequests(t *testing.T) {
	c, be, disk := startPipe(t)
	c.greet(clientFlagFixedNewstyle | clientFlagNoZeroes)
	c.optGo("hdd")
	for i := range be.data {
		be.data[i] = byte(i / 4096)
	}
	go func() {
		for i := uint64(0); i < 3; i++ {
			c.write(magicRequest, uint16(0), cmdRead, 100+i, i*4096, uint32(4096))
		}
	}()
	for i := uint64(0); i < 3; i++ {
		var magic, errno uint32
		var handle uint64
		c.read(&magic, &errno, &handle)
		data := make([]byte, 4096)
		c.read(data)
		if handle != 100+i || errno != 0 || data[0] != byte(i) || data[4095] != byte(i) {
			t.Fatalf("reply %d: handle %d errno %d data[0] %d", i, handle, errno, data[0])
		}
	}
	if len(disk.accesses) != 3 {
		t.Fatalf("disk accesses %v, want 3", disk.accesses)
	}
}

// farthestDisk picks the last candidate, so a test sees which ones pick offered.
type farthestDisk struct {
	recordingDisk
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
	for _, tc := range []struct {
		name  string
		queue []pending
		want  int
		// offered are the offsets the disk may choose among.
		offered []int64
	}{
		{"reads", []pending{read(0, 4096), read(8192, 4096), read(4096, 4096)}, 2, []int64{0, 8192, 4096}},
		{"flush is a barrier", []pending{read(0, 4096), {req: request{kind: cmdFlush}}, read(8192, 4096)}, 0, []int64{0}},
		{"flush first", []pending{{req: request{kind: cmdFlush}}, read(0, 4096)}, 0, nil},
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
