package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
)

// fakeDriver is all of a CSI driver the registrar asks: GetPluginInfo.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
}

func (fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: testDriver, VendorVersion: "test"}, nil
}

// startRegistrar runs the registrar as main() does, until ctx ends (main's
// SIGTERM), against a fake driver, where a killed predecessor left its
// socket, and connects to it as kubelet would. done gives run's result.
func startRegistrar(ctx context.Context, t *testing.T) (done <-chan error, client registerapi.RegistrationClient, socketPath, healthURL string) {
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
	cfg, err := parseFlags([]string{"--csi-address=" + csiLis.Addr().String(), "--kubelet-registration-path=" + kubeletPath,
		"--plugin-registration-path=" + dir, "--http-endpoint=" + httpAddr, "--timeout=5s", "--v=5"})
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() { result <- run(ctx, cfg) }()

	// Retried until the registrar has replaced the stale socket.
	conn, err := connection.Connect(ctx, socketPath, nil, connection.WithTimeout(waitBound))
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return result, registerapi.NewRegistrationClient(conn), socketPath, "http://" + httpAddr + "/healthz"
}

// TestKubeletRegistersTheDriver plays kubelet's side of plugin registration
// and the liveness probe, then stops the registrar as kubelet does.
func TestKubeletRegistersTheDriver(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done, client, socketPath, healthURL := startRegistrar(ctx, t)
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

	stop() // what SIGTERM does to main's context
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v, want none (exit code 0)", err)
		}
	case <-time.After(waitBound):
		t.Fatal("the registrar did not stop")
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after SIGTERM (lstat: %v)", err)
	}
}
