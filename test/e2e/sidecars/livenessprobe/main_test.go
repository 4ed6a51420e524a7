package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/fakecsi"
)

// runMainEnv makes the test binary run main() instead of the tests, so the
// process-level behaviour (flags, signals, exit codes) is tested as shipped.
const runMainEnv = "LIVENESSPROBE_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"livenessprobe"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// waitForListener waits until the child process accepts TCP connections on addr.
func waitForListener(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(clientTimeout)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("livenessprobe process never listened on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessServesHealthzAndStopsOnSIGTERM(t *testing.T) {
	fake := fakecsi.Start(t, "ssdcache.io")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := lis.Addr().String()
	_ = lis.Close()

	cmd := exec.Command(os.Args[0], "--csi-address="+fake.Endpoint, "--http-endpoint="+httpAddr, "--v=5")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start livenessprobe process: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	waitForListener(t, httpAddr)
	// The listener opens before the driver is discovered, so this GET waits for it.
	if code, body := getHealthz(t, fmt.Sprintf("http://%s/healthz", httpAddr)); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", code, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) || err != nil {
		t.Errorf("process after SIGTERM: %v, want exit code 0", err)
	}
}
