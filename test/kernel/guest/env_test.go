package guest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	return e
}

// plugin is a running ssdcache-node process.
type plugin struct {
	t        testing.TB
	env      env
	base     []string
	args     []string
	socket   string
	cmd      *exec.Cmd
	log      *lockedBuffer
	exited   chan error
	conn     *grpc.ClientConn
	ctrl     csi.ControllerClient
	node     csi.NodeClient
	identity csi.IdentityClient
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

// launch runs ssdcache-node with the common flags and args.
func launch(t testing.TB, e env, socket string, args []string) *plugin {
	t.Helper()
	p := &plugin{t: t, env: e, socket: socket}
	p.base = append([]string{"--agent=false", "--node-name=" + nodeName, "--csi-endpoint=unix://" + p.socket,
		"--metrics-address=127.0.0.1:9810", "--health-interval=500ms", "--sample-interval=1s", "--v=2"}, args...)
	p.args = p.base
	p.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ssdcache-node log:\n%s", p.log)
		}
	})
	return p
}

func (p *plugin) start() {
	p.t.Helper()
	p.log = &lockedBuffer{}
	p.cmd = exec.Command(p.env.nodeBin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan error, 1)
	go func() { p.exited <- p.cmd.Wait() }()
	p.t.Cleanup(p.stop)
	if err := p.waitReady(); err != nil {
		p.t.Fatalf("ssdcache-node did not come up: %v\n%s", err, p.log)
	}
}

func (p *plugin) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-p.exited:
			p.exited <- err
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if _, err := os.Stat(p.socket); err == nil {
			return p.connect()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no socket %s after 60s", p.socket)
}

func (p *plugin) connect() error {
	conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	p.conn, p.ctrl, p.node, p.identity = conn, csi.NewControllerClient(conn), csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.identity.Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
	return err
}

// stop ends the plugin gracefully (SIGTERM), as a pod deletion would.
func (p *plugin) stop() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	if p.conn != nil {
		_ = p.conn.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitExit waits for the process to end by itself (a fault point killed it).
func (p *plugin) waitExit(timeout time.Duration) error {
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(timeout):
		return fmt.Errorf("still running after %v", timeout)
	}
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
	cmdline := fmt.Sprintf(format, args...)
	out, err := exec.Command("bash", "-c", cmdline).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmdline, err, out)
	}
	return strings.TrimSpace(string(out))
}

// trySh is sh that returns the error instead of failing.
func trySh(format string, args ...any) (string, error) {
	out, err := exec.Command("bash", "-c", fmt.Sprintf(format, args...)).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// dataset writes n files of 1 MiB of random data under dir and returns
// their checksums, to verify after every change.
func dataset(t testing.TB, dir string, n int) map[string]string {
	t.Helper()
	sums := map[string]string{}
	buf := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		f, err := os.Open("/dev/urandom")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Read(buf); err != nil {
			t.Fatal(err)
		}
		f.Close()
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
// cache) and compares checksums.
func verify(t testing.TB, sums map[string]string) {
	t.Helper()
	for name, want := range sums {
		out := sh(t, "dd if=%s iflag=direct bs=1M status=none | sha256sum", name)
		if got := strings.Fields(out)[0]; got != want {
			t.Fatalf("%s: checksum %s, want %s", name, got, want)
		}
	}
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
