package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
)

// fakeDisk is an in-memory Backend and a Scheduler serving in arrival order;
// it logs what the server asks of either. Only the connection's serving
// goroutine uses it, and the tests read it once that has ended.
type fakeDisk struct {
	data []byte
	log  []string
}

// badOffset is where reads fail, as on a bad sector.
const badOffset = testSize - 4096

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

const testSize = 1 << 20

// startPipe serves a fresh in-memory export on one end of a pipe. wait
// returns what ServeConn returned once the connection has ended.
func startPipe(t *testing.T) (c *testClient, d *fakeDisk, wait func() error) {
	t.Helper()
	d = &fakeDisk{data: make([]byte, testSize)}
	srv := &Server{export: Export{Size: testSize, Backend: d, Disk: d}, logger: klog.Background()}
	serverSide, clientSide := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(serverSide) }()
	wait = sync.OnceValue(func() error { return <-done })
	t.Cleanup(func() { clientSide.Close(); wait() })
	return newTestClient(t, clientSide), d, wait
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

func (s step) n() uint32 { return s.length + uint32(len(s.write)+len(s.read)) }

// TestRequests negotiates as qemu does, sends each sequence of requests at
// once, as qemu keeps several in flight, then NBD_CMD_DISC, and reads the
// replies: each must come for its handle with its data, and the server must
// end cleanly.
func TestRequests(t *testing.T) {
	text, ones, zeroes := bytes.Repeat([]byte("ssdcache"), 512), bytes.Repeat([]byte{1}, 4096), make([]byte, 4096)
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"write and read back", []step{
			{kind: cmdWrite, offset: 8192, write: text, log: "media 8192+4096, write 8192+4096"},
			{kind: cmdWrite, write: ones, log: "media 0+4096, write 0+4096"},
			{kind: cmdRead, offset: 8192, read: text, log: "media 8192+4096, read 8192+4096"},
			{kind: cmdRead, read: ones, log: "media 0+4096, read 0+4096"},
		}},
		{"FUA, flush and write-zeroes", []step{
			{kind: cmdWrite, flags: cmdFlagFUA, write: ones, log: "media 0+4096, write 0+4096, sync"},
			{kind: cmdFlush, log: "sync"},
			{kind: cmdWriteZeroes, length: 4096, log: "media 0+4096, write 0+4096"},
			{kind: cmdRead, read: zeroes, log: "media 0+4096, read 0+4096"},
		}},
		{"errors are replies, not disconnects", []step{
			{kind: cmdRead, offset: testSize - 512, length: 4096, errno: errInvalid},
			{kind: cmdWrite, offset: testSize, write: zeroes[:512], errno: errNoSpace},
			{kind: 4, length: 512, errno: errInvalid}, // trim: not offered
			{kind: cmdRead, offset: badOffset, length: 512, errno: errIO, log: fmt.Sprintf("media %d+512, read %[1]d+512", badOffset)},
			{kind: cmdRead, read: zeroes[:512], log: "media 0+512, read 0+512"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d, wait := startPipe(t)
			if size := c.negotiate(); size != testSize {
				t.Fatalf("export size %d, want %d", size, testSize)
			}
			var log []string
			for _, s := range tc.steps {
				c.send(s.kind, s.flags, s.offset, s.n(), s.write)
				log = append(log, s.log)
			}
			c.write(magicRequest, uint16(0), cmdDisc, uint64(0), uint64(0), uint32(0))
			for i, s := range tc.steps {
				if errno, got := c.reply(s.kind, s.n()); errno != s.errno || !bytes.Equal(got, s.read) {
					t.Errorf("step %d: errno %d, want %d; read %.8q, want %.8q", i, errno, s.errno, got, s.read)
				}
			}
			if err := wait(); err != nil {
				t.Fatalf("after NBD_CMD_DISC the server ended with %v", err)
			}
			if got, want := strings.Join(d.log, ", "), strings.Join(slices.DeleteFunc(log, func(s string) bool { return s == "" }), ", "); got != want {
				t.Errorf("the server did\n  %s\nwant\n  %s", got, want)
			}
		})
	}
}

// StartSim end to end over a real unix socket and sparse file, with the
// model's clock faked so the test does not depend on timing.
func TestSimOverUnixSocketKeepsDataAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := SimConfig{Socket: filepath.Join(dir, "hdd.sock"), File: filepath.Join(dir, "hdd.img"), Model: model.Defaults(64 << 20)}
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
		c.negotiate()
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
	if st, _ := os.Stat(cfg.File); st.Size() != cfg.Model.Capacity {
		t.Fatalf("backing file size %d, want %d", st.Size(), cfg.Model.Capacity)
	}
}

type countingClock struct {
	mu    sync.Mutex
	slept time.Duration
}

func (c *countingClock) Now() time.Time        { return time.Unix(0, 0) }
func (c *countingClock) Sleep(d time.Duration) { c.mu.Lock(); c.slept += d; c.mu.Unlock() }

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
