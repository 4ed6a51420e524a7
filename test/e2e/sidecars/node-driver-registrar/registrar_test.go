package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	testDriver = "ssdcache.io"
	waitBound  = 30 * time.Second // generous bound on waits, never a pass/fail timing
)

// fakeDriver is all of a CSI driver the registrar asks: GetPluginInfo.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
}

func (fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: testDriver, VendorVersion: "test"}, nil
}

// TestRegistrationSocketLifecycle covers what the e2e never meets: a socket
// that a killed predecessor left is replaced, and stopping (main's SIGTERM
// cancels run's context) removes the socket, upon which kubelet deregisters
// the driver. The rest of the exchange (GetInfo's endpoint and versions,
// /healthz) is kubelet's in the e2e, whose CSINode check and probes fail
// without it.
func TestRegistrationSocketLifecycle(t *testing.T) {
	dir := t.TempDir()
	csiLis, err := net.Listen("unix", filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	driver := grpc.NewServer()
	csi.RegisterIdentityServer(driver, fakeDriver{})
	go func() { _ = driver.Serve(csiLis) }()
	t.Cleanup(driver.Stop)

	socketPath := filepath.Join(dir, testDriver+"-reg.sock")
	stale, err := net.Listen("unix", socketPath)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()

	cfg, err := parseFlags([]string{"--csi-address=" + csiLis.Addr().String(),
		"--kubelet-registration-path=/var/lib/kubelet/plugins/ssdcache.io/csi.sock", "--plugin-registration-path=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()

	// Retried until the registrar has replaced the stale socket.
	conn, err := connection.Connect(ctx, socketPath, nil, connection.WithTimeout(waitBound))
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	defer func() { _ = conn.Close() }()
	client := registerapi.NewRegistrationClient(conn)
	if info, err := client.GetInfo(ctx, &registerapi.InfoRequest{}); err != nil || info.Name != testDriver {
		t.Fatalf("GetInfo on the replaced socket = %v, %v; want driver %s", info, err, testDriver)
	}
	// Kubelet's answer; an error back would only show in kubelet's log.
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(registered): %v", err)
	}

	stop()
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
