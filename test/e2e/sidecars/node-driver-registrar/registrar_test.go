package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	testDriver  = "ssdcache.io"
	kubeletPath = "/var/lib/kubelet/plugins/ssdcache.io/csi.sock"
	waitBound   = 30 * time.Second // generous bound on waits, never a pass/fail timing
	// runMainEnv makes the test binary run main() instead of the tests, so
	// that flags, signals and exit codes are tested as shipped.
	runMainEnv = "NODE_DRIVER_REGISTRAR_RUN_MAIN"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"node-driver-registrar"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func registrarCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// fakeDriver is all of a CSI driver the registrar asks: GetPluginInfo.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
}

func (fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: testDriver, VendorVersion: "test"}, nil
}

// startRegistrar runs main() in a child process against a fake driver, where
// a killed predecessor left its socket, and connects to it as kubelet would.
func startRegistrar(t *testing.T) (cmd *exec.Cmd, client registerapi.RegistrationClient, socketPath, healthURL string) {
	t.Helper()
	dir := t.TempDir()
	csiLis, err := net.Listen("unix", filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	driver := grpc.NewServer()
	csi.RegisterIdentityServer(driver, fakeDriver{})
	go func() { _ = driver.Serve(csiLis) }()
	t.Cleanup(driver.Stop)

	socketPath = filepath.Join(dir, testDriver+"-reg.sock")
	stale, err := net.Listen("unix", socketPath)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()

	httpLis, err := net.Listen("tcp", "127.0.0.1:0") // a port free a moment ago
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := httpLis.Addr().String()
	_ = httpLis.Close()
	cmd = registrarCommand("--csi-address="+csiLis.Addr().String(), "--kubelet-registration-path="+kubeletPath,
		"--plugin-registration-path="+dir, "--http-endpoint="+httpAddr, "--timeout=5s", "--v=5")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registrar process: %v", err)
	}
	// One that does not exit when it should is killed, which its exit code then shows.
	killer := time.AfterFunc(waitBound, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() { killer.Stop(); _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// Retried until the registrar has replaced the stale socket.
	conn, err := connection.Connect(context.Background(), socketPath, nil, connection.WithTimeout(waitBound))
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cmd, registerapi.NewRegistrationClient(conn), socketPath, "http://" + httpAddr + "/healthz"
}

// TestKubeletRegistersTheDriver plays kubelet's side of plugin registration
// and the liveness probe, then stops the registrar as kubelet does.
func TestKubeletRegistersTheDriver(t *testing.T) {
	cmd, client, socketPath, healthURL := startRegistrar(t)
	ctx := context.Background()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	want := &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriver, Endpoint: kubeletPath, SupportedVersions: []string{"1.0.0"}}
	if err != nil || !proto.Equal(info, want) {
		t.Fatalf("GetInfo = %v, %v; want %v", info, err, want)
	}
	resp, err := (&http.Client{Timeout: waitBound}).Get(healthURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // a short read shows as a wrong body
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(registered): %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit code 0", err)
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after SIGTERM (lstat: %v)", err)
	}
}
