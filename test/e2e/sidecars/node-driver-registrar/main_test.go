package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/fakecsi"
)

// runMainEnv makes the test binary run main() instead of the tests, so the
// process-level behaviour (flags, signals, exit codes) is tested as shipped.
const runMainEnv = "NODE_DRIVER_REGISTRAR_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"node-driver-registrar"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// freeLoopbackAddress returns a loopback host:port that was free a moment ago.
func freeLoopbackAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Close() }()
	return lis.Addr().String()
}

// startProcess runs main() in a child process with the chart's flags.
func startProcess(t *testing.T) (cmd *exec.Cmd, socketPath, healthURL string) {
	t.Helper()
	fake := fakecsi.Start(t, testDriver)
	regDir := t.TempDir()
	httpAddr := freeLoopbackAddress(t)
	cmd = exec.Command(os.Args[0],
		"--csi-address="+fake.Endpoint,
		"--kubelet-registration-path="+kubeletPath,
		"--plugin-registration-path="+regDir,
		"--http-endpoint="+httpAddr,
		"--v=5")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registrar process: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, filepath.Join(regDir, testDriver+"-reg.sock"), fmt.Sprintf("http://%s/healthz", httpAddr)
}

func exitCode(err error) int {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestProcessRegistersAndCleansUpOnSIGTERM(t *testing.T) {
	cmd, socketPath, healthURL := startProcess(t)
	client := registrationClient(t, socketPath)
	if info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil || info.Name != testDriver {
		t.Fatalf("GetInfo = %v, %v; want driver %s", info, err, testDriver)
	}
	if code, body := getHealthz(t, healthURL); code != http.StatusOK {
		t.Errorf("/healthz = %d %q, want 200", code, body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(cmd.Wait()); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after SIGTERM (lstat: %v)", err)
	}
}

func TestProcessExitsOneWhenKubeletRejectsIt(t *testing.T) {
	cmd, socketPath, _ := startProcess(t)
	client := registrationClient(t, socketPath)
	// The process exits inside the call, so the call itself may fail.
	_, _ = client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "rejected"})
	if code := exitCode(cmd.Wait()); code != 1 {
		t.Errorf("exit code after a failed registration = %d, want 1", code)
	}
}

func TestProcessRejectsAMissingKubeletRegistrationPath(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--csi-address=/csi/csi.sock")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 2 {
		t.Errorf("exit code = %d, want 2; output:\n%s", code, out)
	}
}
