package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/fakecsi"
	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

const (
	testDriver   = "ssdcache.io"
	kubeletPath  = "/var/lib/kubelet/plugins/ssdcache.io/csi.sock"
	waitForReady = 30 * time.Second // generous bound on waits, never a pass/fail timing
)

// exitRecorder stands in for os.Exit.
type exitRecorder struct {
	mu    sync.Mutex
	codes []int
}

func (e *exitRecorder) exit(code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.codes = append(e.codes, code)
}

func (e *exitRecorder) recorded() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int(nil), e.codes...)
}

// startRegistrar runs the registrar against a fake driver and returns the
// registration socket path, the /healthz URL and a stop function that
// returns run's error.
func startRegistrar(t *testing.T, exit func(int)) (socketPath, healthURL string, stop func() error) {
	t.Helper()
	fake := fakecsi.Start(t, testDriver)
	cfg := config{
		csiAddress:              fake.Endpoint,
		kubeletRegistrationPath: kubeletPath,
		pluginRegistrationPath:  t.TempDir(),
		timeout:                 5 * time.Second,
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for /healthz: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- newRegistrar(cfg, exit).run(ctx, httpLis) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() { _ = stop() })
	socketPath = filepath.Join(cfg.pluginRegistrationPath, testDriver+"-reg.sock")
	return socketPath, "http://" + httpLis.Addr().String() + "/healthz", stop
}

// registrationClient connects to the registration socket as kubelet would,
// waiting for the registrar to create it.
func registrationClient(t *testing.T, socketPath string) registerapi.RegistrationClient {
	t.Helper()
	// Wait for the socket file first: a dial that fails backs off for a second.
	deadline := time.Now().Add(waitForReady)
	for _, err := os.Lstat(socketPath); err != nil && time.Now().Before(deadline); _, err = os.Lstat(socketPath) {
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := sidecar.Connect(context.Background(), socketPath, waitForReady)
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return registerapi.NewRegistrationClient(conn)
}

func getHealthz(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: waitForReady}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read /healthz body: %v", err)
	}
	return resp.StatusCode, string(body)
}

// serveRegistration serves a registration server for driverName on lis until the test ends.
func serveRegistration(t *testing.T, lis net.Listener, driverName string) {
	t.Helper()
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, newRegistrationServer(driverName, kubeletPath, (&exitRecorder{}).exit))
	go func() { _ = server.Serve(lis) }()
	t.Cleanup(server.Stop)
}

// serveOnce runs one GET /healthz through handler.
func serveOnce(handler http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

func TestRegistrarServesGetInfoAndRemovesSocketOnStop(t *testing.T) {
	exits := &exitRecorder{}
	socketPath, healthURL, stop := startRegistrar(t, exits.exit)
	client := registrationClient(t, socketPath)

	info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != testDriver || info.Endpoint != kubeletPath ||
		strings.Join(info.SupportedVersions, ",") != "1.0.0" {
		t.Errorf("GetInfo = {Type:%q Name:%q Endpoint:%q Versions:%v}, want {CSIPlugin %s %s [1.0.0]}",
			info.Type, info.Name, info.Endpoint, info.SupportedVersions, testDriver, kubeletPath)
	}
	if code, body := getHealthz(t, healthURL); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", code, body)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(registered): %v", err)
	}
	if codes := exits.recorded(); len(codes) != 0 {
		t.Errorf("exit called with %v after a successful registration, want no exit", codes)
	}

	if err := stop(); err != nil {
		t.Fatalf("run returned %v after stop, want nil", err)
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket %s still there after stop (lstat: %v)", socketPath, err)
	}
}

func TestFailedRegistrationExitsNonZero(t *testing.T) {
	exits := &exitRecorder{}
	socketPath, _, _ := startRegistrar(t, exits.exit)
	client := registrationClient(t, socketPath)

	status := &registerapi.RegistrationStatus{PluginRegistered: false, Error: "driver name taken"}
	if _, err := client.NotifyRegistrationStatus(context.Background(), status); err != nil {
		t.Fatalf("NotifyRegistrationStatus(failed): %v", err)
	}
	if codes := exits.recorded(); len(codes) != 1 || codes[0] != 1 {
		t.Errorf("exit codes after failed registration = %v, want [1]", codes)
	}
}

func TestHealthzWithoutLiveSocket(t *testing.T) {
	dir := t.TempDir()
	missing := &healthChecker{socketPath: filepath.Join(dir, "absent-reg.sock"), driverName: testDriver, timeout: time.Second}
	if code, body := serveOnce(missing); code != http.StatusNotFound || body != "registration socket does not exist" {
		t.Errorf("/healthz without socket = %d %q, want 404", code, body)
	}

	// A socket that answers for another driver is not ours.
	otherPath := filepath.Join(dir, "other-reg.sock")
	lis, err := listenRegistrationSocket(otherPath)
	if err != nil {
		t.Fatal(err)
	}
	serveRegistration(t, lis, "other.example.com")
	wrong := &healthChecker{socketPath: otherPath, driverName: testDriver, timeout: waitForReady}
	if code, body := serveOnce(wrong); code != http.StatusInternalServerError || !strings.Contains(body, "other.example.com") {
		t.Errorf("/healthz on another driver's socket = %d %q, want 500 naming other.example.com", code, body)
	}
}

func TestStaleSocketIsReplacedOtherFilesAreNot(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale-reg.sock")
	old, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false) // as if the old process was killed
	_ = old.Close()
	lis, err := listenRegistrationSocket(stale)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	_ = lis.Close()

	regular := filepath.Join(dir, "regular-reg.sock")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenRegistrationSocket(regular); err == nil || !strings.Contains(err.Error(), "non-socket") {
		t.Errorf("listen over a regular file: err = %v, want a refusal", err)
	}
	if data, err := os.ReadFile(regular); err != nil || string(data) != "keep" {
		t.Errorf("regular file changed: %q, %v", data, err)
	}
}

func TestRunReturnsWhenStoppedBeforeDriverAnswers(t *testing.T) {
	cfg := config{
		csiAddress:              filepath.Join(t.TempDir(), "never.sock"),
		kubeletRegistrationPath: kubeletPath,
		pluginRegistrationPath:  t.TempDir(),
		timeout:                 time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := newRegistrar(cfg, (&exitRecorder{}).exit).run(ctx, nil); err != nil {
		t.Errorf("run stopped while waiting for the driver = %v, want nil", err)
	}
}

func TestRegistrationSocketPathRejectsSeparators(t *testing.T) {
	if _, err := registrationSocketPath("/registration", "../evil"); err == nil {
		t.Error("driver name with a path separator accepted")
	}
	got, err := registrationSocketPath("/registration", testDriver)
	if err != nil || got != "/registration/ssdcache.io-reg.sock" {
		t.Errorf("registrationSocketPath = %q, %v; want /registration/ssdcache.io-reg.sock", got, err)
	}
}
