package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

type identityOnly struct {
	csi.UnimplementedIdentityServer
}

func (identityOnly) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "ssdcache.io", VendorVersion: "test"}, nil
}

// TestAwaitCSIWaitsForTheSocketToServe: the hook returns only after a socket
// that appears later answers, and fails, naming the endpoint, when none does.
func TestAwaitCSIWaitsForTheSocketToServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	go func() {
		time.Sleep(1500 * time.Millisecond)
		lis, err := net.Listen("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		srv := grpc.NewServer()
		csi.RegisterIdentityServer(srv, identityOnly{})
		t.Cleanup(srv.Stop)
		_ = srv.Serve(lis)
	}()
	start := time.Now()
	if err := awaitCSI(t.Context(), "unix://"+sock, time.Minute); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("returned after %s, before the socket existed", waited)
	}

	absent := "unix://" + filepath.Join(t.TempDir(), "absent.sock")
	err := awaitCSI(t.Context(), absent, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), absent) {
		t.Errorf("awaitCSI on a socket nobody serves: %v, want an error naming %s", err, absent)
	}
	if err := awaitCSI(t.Context(), "tcp://127.0.0.1:1", time.Second); err == nil {
		t.Error("awaitCSI accepted a non-unix endpoint")
	}
}
