package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// runMainEnv makes the test binary run main() instead of the tests, so that
	// flags, signals and exit codes are tested as shipped.
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

// serveGRPC serves what register adds on a unix socket at path until the test ends.
func serveGRPC(t *testing.T, path string, register func(*grpc.Server)) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	register(server)
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
}

// startRegistrar runs main() in a child process against a fake driver, with
// the flags the chart passes, where a killed predecessor left its socket.
func startRegistrar(t *testing.T) (cmd *exec.Cmd, socketPath, healthURL string) {
	t.Helper()
	csiSocket := filepath.Join(t.TempDir(), "csi.sock")
	serveGRPC(t, csiSocket, func(s *grpc.Server) { csi.RegisterIdentityServer(s, fakeDriver{}) })
	regDir := t.TempDir()
	socketPath = filepath.Join(regDir, testDriver+"-reg.sock")
	stale, err := net.Listen("unix", socketPath)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()

	httpAddr := freeLoopbackAddress(t)
	cmd = registrarCommand("--csi-address="+csiSocket, "--kubelet-registration-path="+kubeletPath,
		"--plugin-registration-path="+regDir, "--http-endpoint="+httpAddr, "--timeout=5s", "--v=5")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registrar process: %v", err)
	}
	// One that does not exit when it should is killed, which its exit code then shows.
	killer := time.AfterFunc(waitBound, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() { killer.Stop(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, socketPath, "http://" + httpAddr + "/healthz"
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

// registrationClient connects to the registration socket as kubelet would,
// retrying until the registrar has replaced the stale socket.
func registrationClient(t *testing.T, socketPath string) registerapi.RegistrationClient {
	t.Helper()
	conn, err := connection.Connect(context.Background(), socketPath, nil, connection.WithTimeout(waitBound))
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func getHealthz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: waitBound}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body) // a short read shows as a wrong body
	return resp.StatusCode, string(body)
}

// exitCode waits for cmd and returns its exit code, -1 if a signal killed it.
func exitCode(cmd *exec.Cmd) int {
	_ = cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

// TestKubeletRegistersTheDriver plays kubelet's side of plugin registration
// and the liveness probe, then stops the registrar as kubelet does.
func TestKubeletRegistersTheDriver(t *testing.T) {
	cmd, socketPath, healthURL := startRegistrar(t)
	client := registrationClient(t, socketPath)
	ctx := context.Background()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	want := &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriver, Endpoint: kubeletPath, SupportedVersions: []string{"1.0.0"}}
	if err != nil || !proto.Equal(info, want) {
		t.Fatalf("GetInfo = %v, %v; want %v", info, err, want)
	}
	if code, body := getHealthz(t, healthURL); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", code, body)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(registered): %v", err)
	}
	if _, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil {
		t.Errorf("GetInfo after a successful registration: %v; want the registrar still serving", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(cmd); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after SIGTERM (lstat: %v)", err)
	}
}

func TestRejectedRegistrationExitsOne(t *testing.T) {
	cmd, socketPath, _ := startRegistrar(t)
	client := registrationClient(t, socketPath)
	// The process exits inside the call, so the call itself may fail.
	_, _ = client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{Error: "driver name taken"})
	if code := exitCode(cmd); code != 1 {
		t.Errorf("exit code after a failed registration = %d, want 1", code)
	}
}

func TestHealthzFailsWithoutThisDriversSocket(t *testing.T) {
	healthz := func(socketPath string) (int, string) {
		rec := httptest.NewRecorder()
		h := &healthChecker{socketPath: socketPath, driverName: testDriver, timeout: waitBound}
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	dir := t.TempDir()
	if code, body := healthz(filepath.Join(dir, "absent-reg.sock")); code != http.StatusNotFound || body != "registration socket does not exist" {
		t.Errorf("/healthz without socket = %d %q, want 404", code, body)
	}
	other := filepath.Join(dir, "other-reg.sock")
	serveGRPC(t, other, func(s *grpc.Server) {
		registerapi.RegisterRegistrationServer(s, &registrationServer{driverName: "other.example.com", endpoint: kubeletPath})
	})
	if code, body := healthz(other); code != http.StatusInternalServerError || !strings.Contains(body, "other.example.com") {
		t.Errorf("/healthz on another driver's socket = %d %q, want 500 naming other.example.com", code, body)
	}
}

func TestStopWhileWaitingForTheDriverIsNoError(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := run(ctx, config{csiAddress: filepath.Join(t.TempDir(), "never.sock")}, nil); err != nil {
		t.Errorf("run stopped while waiting for the driver = %v, want nil", err)
	}
}

// TestRegistrationSocketNeverReplacesOtherFiles: only a stale socket is replaced
// (see startRegistrar); any other file at its path is left alone.
func TestRegistrationSocketNeverReplacesOtherFiles(t *testing.T) {
	regular := filepath.Join(t.TempDir(), "regular-reg.sock")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if lis, err := listenRegistrationSocket(regular); err == nil {
		_ = lis.Close()
		t.Error("listened over a regular file, want a refusal")
	}
	if data, err := os.ReadFile(regular); err != nil || string(data) != "keep" {
		t.Errorf("regular file changed: %q, %v", data, err)
	}
}
