package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	vmguest "github.com/ssdcache/ssdcache/test/vm/guest"
)

// env is what the host tells the guest tests.
type env struct {
	nodeBin string // ssdcache-node
	hdd     string // /dev/disk/by-id path of the HDD
	ssd     string // /dev/disk/by-id path of the NVMe
	work    string // scratch dir
}

func guestEnv(t testing.TB) env {
	t.Helper()
	if os.Getenv("SSDCACHE_GUEST") != "1" {
		t.Skip("kernel suite test: runs inside the VM (make test-kernel); SSDCACHE_GUEST is not 1")
	}
	e := env{nodeBin: os.Getenv("SSDCACHE_NODE_BIN"), hdd: os.Getenv("SSDCACHE_HDD"), ssd: os.Getenv("SSDCACHE_SSD"), work: os.Getenv("SSDCACHE_WORK")}
	if e.nodeBin == "" || e.hdd == "" || e.ssd == "" || e.work == "" {
		t.Fatalf("SSDCACHE_NODE_BIN, SSDCACHE_HDD, SSDCACHE_SSD and SSDCACHE_WORK must all be set: %+v", e)
	}
	if _, err := suiteDeadline(); err != nil {
		t.Fatal(err)
	}
	return e
}

// plugin is a running ssdcache-node process and its CSI clients.
type plugin struct {
	t      testing.TB
	env    env
	base   []string
	args   []string
	socket string
	proc   *vmguest.Process
	log    *lockedBuffer
	csi    *vmguest.Clients
}

const (
	originVG = "ssdcache-hdd"
	cacheVG  = "ssdcache-nvme"
	nodeName = "ssdcache-vm"
)

// startPlugin runs ssdcache-node without the API (the kernel suite has no
// cluster) on the VM's disks, plus extra flags.
func startPlugin(t testing.TB, e env, extra ...string) *plugin {
	t.Helper()
	socket := filepath.Join(e.work, "csi.sock")
	return launch(t, e, socket, append([]string{"--origin-devices=" + e.hdd, "--cache-devices=" + e.ssd}, extra...))
}

func launch(t testing.TB, e env, socket string, args []string) *plugin {
	t.Helper()
	p := &plugin{t: t, env: e, socket: socket}
	p.base = append(append(vmguest.NodeArgs(nodeName, p.socket),
		"--health-interval=500ms", "--sample-interval=1s", "--state-dir="+stateDir()), args...)
	p.args = p.base
	p.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ssdcache-node log:\n%s", p.log)
		}
	})
	return p
}

// start spawns the plugin and waits until it answers Probe on its socket.
func (p *plugin) start() {
	p.t.Helper()
	p.spawn()
	p.t.Cleanup(p.stop)
	var err error
	if p.csi, err = vmguest.WaitReady(ctx(p.t), p.proc, p.socket, grpc.WithUnaryInterceptor(retryAborted)); err != nil {
		p.t.Fatalf("ssdcache-node did not come up: %v\n%s", err, p.diagnose())
	}
}

// spawn starts the process with p.args, its output in a new log.
func (p *plugin) spawn() {
	p.t.Helper()
	p.log = &lockedBuffer{}
	proc, err := vmguest.StartProcess(p.env.nodeBin, p.args, p.log)
	if err != nil {
		p.t.Fatal(err)
	}
	p.proc = proc
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// logTail is how many of the plugin's last log lines a failure quotes (the
// whole log is logged when the test fails, see launch).
const logTail = 40

// diagnose is what a failed wait on the plugin reports: whether it still
// runs, the last lines it logged and the device-mapper state, where a device
// left suspended or with an inactive table explains a hang.
func (p *plugin) diagnose() string {
	state := fmt.Sprintf("ssdcache-node is still running (pid %d)", p.proc.Pid())
	if exited, err := p.proc.Exited(); exited {
		state = "ssdcache-node has exited: " + exitText(err)
	}
	return fmt.Sprintf("%s\n--- its last %d log lines:\n%s\n%s",
		state, logTail, lastLines(p.log.String(), logTail), dmState())
}

// dmState is `dmsetup info -c`, `dmsetup table` and the processes, for
// failure reports.
func dmState() string {
	var b strings.Builder
	for _, cmd := range []string{"dmsetup info -c", "dmsetup table", "ps -eo pid,ppid,stat,etime,args"} {
		// Neither flushes nor waits on a suspended device; the timeout
		// keeps a report from hanging all the same.
		out, err := trySh("timeout 60 %s", cmd)
		if err != nil {
			out += "\n(" + err.Error() + ")"
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", cmd, out)
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// stopGrace is how long stop waits between SIGTERM and SIGKILL: more than
// the plugin's own bound on draining CSI calls (10 s) plus a slow LVM
// command's exit, as killing the plugin in the middle of an LVM command is
// what the tests must not do by accident (the crash tests do it at chosen
// fault points).
const stopGrace = 45 * time.Second

// stop ends the plugin gracefully (SIGTERM), as a pod deletion would.
func (p *plugin) stop() {
	if p.csi != nil {
		_ = p.csi.Conn.Close()
		p.csi = nil
	}
	err := p.proc.Stop(stopGrace, func() {
		p.t.Logf("ssdcache-node still running %v after SIGTERM: killing it\n%s", stopGrace, p.diagnose())
	})
	if errors.Is(err, exec.ErrWaitDelay) {
		ps, _ := trySh("ps -eo pid,ppid,stat,etime,args")
		p.t.Logf("ssdcache-node exited, but a process it started still holds its output:\n%s", ps)
	}
}

// waitExit waits until the suite's deadline for the process to end by
// itself (a fault point killed it) and returns how it ended.
func (p *plugin) waitExit() error {
	if exited, err := p.proc.Wait(time.Until(deadline())); exited {
		return err
	}
	return fmt.Errorf("ssdcache-node still running at the suite's deadline (%s)\n%s", deadline().Format(time.TimeOnly), p.diagnose())
}

// restart starts the plugin again with other extra flags.
func (p *plugin) restart(extra ...string) {
	p.t.Helper()
	p.stop()
	p.args = append(append([]string{}, p.base...), extra...)
	p.start()
}

// sh runs a shell command and returns its output, failing the test on error.
func sh(t testing.TB, format string, args ...any) string {
	t.Helper()
	out, err := trySh(format, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", fmt.Sprintf(format, args...), err, out)
	}
	return out
}

// trySh is sh that returns the error instead of failing.
func trySh(format string, args ...any) (string, error) {
	out, err := exec.Command("bash", "-c", fmt.Sprintf(format, args...)).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// dataset writes n files of 1 MiB of random data under dir and returns
// their checksums, to verify after every change.
func dataset(t testing.TB, dir string, n int) map[string]string {
	t.Helper()
	sums := map[string]string{}
	buf := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		rand.Read(buf)
		name := filepath.Join(dir, fmt.Sprintf("file-%03d", i))
		if err := os.WriteFile(name, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf)
		sums[name] = hex.EncodeToString(sum[:])
	}
	sh(t, "sync")
	return sums
}

// verify re-reads every file with O_DIRECT (through the cache, not the page
// cache) in 1 MiB reads and compares checksums. It reads in-process: a
// dd | sha256sum per file costs three program starts, slow under emulation,
// and the warm tests verify hundreds of files.
func verify(t testing.TB, sums map[string]string) {
	t.Helper()
	buf := blockdev.DirectBuffer(1 << 20)
	for name, want := range sums {
		if got, err := directSHA256(name, buf); err != nil || got != want {
			t.Fatalf("%s: checksum %s (%v), want %s", name, got, err, want)
		}
	}
}

// directSHA256 is the sha256 of the file at name, read with O_DIRECT into
// buf (aligned for direct I/O).
func directSHA256(name string, buf []byte) (string, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	// Behind a plain io.Reader, f reads into buf, not into a buffer of
	// io.Copy's own that O_DIRECT would refuse.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lockedBuffer collects a child's output from its copying goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// retryAborted retries a call the plugin answered Aborted (another operation
// holds the volume, such as a promotion of the blocks read), as kubelet and
// the sidecars do, until the suite's deadline.
func retryAborted(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) != codes.Aborted || time.Now().After(deadline()) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
