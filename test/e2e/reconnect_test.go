package e2e

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
)

// slowHandshakeListener hands its first accepted connection to the gRPC
// server only after a delay, as a plugin on a starved node answers late.
type slowHandshakeListener struct {
	net.Listener
	delay    time.Duration
	accepted atomic.Int32
}

func (l *slowHandshakeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil && l.accepted.Add(1) == 1 {
		time.Sleep(l.delay)
	}
	return c, err
}

// Why startupReconnect exists: csi-lib-utils, which every CSI sidecar
// connects with, gives its first connection one second (grpc's backoff base
// delay: it sets ConnectParams without MinConnectTimeout) to finish the
// HTTP/2 handshake. A plugin that answers later, on a node busy enough, has
// the connection closed under it, and the redial counts as a lost
// connection: csi-provisioner's ExitOnConnectionLoss exits, and kubelet
// restarts it. The e2e's new plugin pod on the emulated node met exactly
// this; the real csi-provisioner image behaves the same.
func TestSidecarsCountASlowFirstHandshakeAsALostConnection(t *testing.T) {
	for delay, wantLost := range map[time.Duration]bool{300 * time.Millisecond: false, 1500 * time.Millisecond: true} {
		if lost := firstConnectionLost(t, delay); lost != wantLost {
			t.Errorf("first handshake %v late: lost connection %v, want %v; if csi-lib-utils now waits longer, startupReconnect may go",
				delay, lost, wantLost)
		}
	}
}

// firstConnectionLost connects as a CSI sidecar does to a server whose
// first handshake is delay late, and says whether the sidecar saw it lost.
func firstConnectionLost(t *testing.T, delay time.Duration) bool {
	socket := filepath.Join(t.TempDir(), "csi.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(&slowHandshakeListener{Listener: lis, delay: delay}) }()
	defer srv.Stop()
	var lost atomic.Bool
	conn, err := connection.Connect(context.Background(), "unix://"+socket, nil,
		connection.OnConnectionLoss(func(context.Context) bool { lost.Store(true); return true }))
	if err != nil {
		t.Fatalf("connecting after a handshake %v late: %v", delay, err)
	}
	conn.Close()
	return lost.Load()
}
