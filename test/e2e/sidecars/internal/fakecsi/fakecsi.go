// Package fakecsi is an in-process CSI Identity server on a unix socket, for
// the stand-in sidecars' unit tests. Its Probe answer is set by the test.
package fakecsi

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Identity is a CSI Identity service whose Probe result the test controls.
type Identity struct {
	csi.UnimplementedIdentityServer

	// Endpoint is the socket path the server listens on.
	Endpoint string

	name   string
	server *grpc.Server

	mu       sync.Mutex
	ready    *bool
	probeErr error
}

// Start serves a fake Identity service named driverName on a socket in a fresh
// temporary directory; the server stops when the test ends.
func Start(t *testing.T, driverName string) *Identity {
	t.Helper()
	endpoint := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", endpoint)
	if err != nil {
		t.Fatalf("listen on %s: %v", endpoint, err)
	}
	id := &Identity{Endpoint: endpoint, name: driverName, server: grpc.NewServer()}
	csi.RegisterIdentityServer(id.server, id)
	go func() { _ = id.server.Serve(lis) }()
	t.Cleanup(id.Stop)
	return id
}

// Stop stops serving; later connections to Endpoint fail.
func (f *Identity) Stop() { f.server.Stop() }

// SetProbe sets Probe's answer: ready nil leaves the field out of the
// response (which CSI says means ready); a non-nil err is returned instead.
func (f *Identity) SetProbe(ready *bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready, f.probeErr = ready, err
}

// GetPluginInfo reports the configured driver name.
func (f *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: f.name, VendorVersion: "test"}, nil
}

// GetPluginCapabilities reports no capabilities.
func (f *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe answers as set by SetProbe.
func (f *Identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.probeErr != nil {
		return nil, f.probeErr
	}
	resp := &csi.ProbeResponse{}
	if f.ready != nil {
		resp.Ready = wrapperspb.Bool(*f.ready)
	}
	return resp, nil
}

// Unavailable is a Probe error as a failing plugin would return it.
func Unavailable(msg string) error { return status.Error(codes.Unavailable, msg) }
