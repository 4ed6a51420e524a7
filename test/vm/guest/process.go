package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// NodeArgs are the flags of every ssdcache-node the guest runs: no node
// agent (there is no API server in the VM), its CSI socket and metrics on
// loopback.
func NodeArgs(nodeName, socket string) []string {
	return []string{"--agent=false", "--node-name=" + nodeName, "--csi-endpoint=unix://" + socket,
		"--metrics-address=" + MetricsAddress, "--v=2"}
}

// MetricsAddress is where ssdcache-node serves /metrics in the VM.
const MetricsAddress = "127.0.0.1:9810"

// Process is a running ssdcache-node.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has ended, err saying how
	err  error
}

// StartProcess starts binary with args, its stdout and stderr to out.
func StartProcess(binary string, args []string, out io.Writer) (*Process, error) {
	p := &Process{cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "LC_ALL=C")
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// A tool the plugin started may outlive it holding out (a daemon LVM
	// spawns); Wait must report the plugin's own exit all the same.
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited says whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits up to timeout for the process to end by itself.
func (p *Process) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
	}
	return p.Exited()
}

// Stop ends the process with SIGTERM, as a pod deletion would, and kills
// it when it is still running after grace, first calling beforeKill (if
// not nil) to report what kept it. err is how the process ended.
func (p *Process) Stop(grace time.Duration, beforeKill func()) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails harmlessly once it has ended
	if exited, err := p.Wait(grace); exited {
		return err
	}
	if beforeKill != nil {
		beforeKill()
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return p.err
}

var ErrNotReady = errors.New("answered Probe, not ready")

// Clients are the CSI clients of one connection to the plugin.
type Clients struct {
	Conn       *grpc.ClientConn
	Controller csi.ControllerClient
	Node       csi.NodeClient
}

// Connect dials the plugin's socket and calls Probe once within ctx; the
// connection is kept only when the plugin answered ready. A failed attempt
// closes its connection, so the next one dials at once rather than after
// gRPC's reconnect backoff, which grows to minutes (a plugin killed at a
// fault point leaves its socket file behind).
func Connect(ctx context.Context, socket string, opts ...grpc.DialOption) (*Clients, error) {
	conn, err := grpc.NewClient("unix://"+socket, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}, grpc.WaitForReady(true))
	if err == nil && resp.GetReady() != nil && !resp.GetReady().GetValue() {
		err = ErrNotReady
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &Clients{Conn: conn, Controller: csi.NewControllerClient(conn), Node: csi.NewNodeClient(conn)}, nil
}

// ProbeAttempt bounds one Probe of WaitReady's tries, not the wait: a
// plugin that died meanwhile is noticed at the next try.
const ProbeAttempt = 10 * time.Second

// WaitReady waits until proc answers Probe ready on socket, dialing anew
// every 100 ms. It fails when proc exits or ctx ends, saying what it last
// saw.
func WaitReady(ctx context.Context, proc *Process, socket string, opts ...grpc.DialOption) (*Clients, error) {
	saw := "no socket yet"
	for {
		if exited, err := proc.Exited(); exited {
			return nil, fmt.Errorf("ssdcache-node exited before it answered Probe: %v", err)
		}
		if _, err := os.Stat(socket); err == nil {
			attempt, cancel := context.WithTimeout(ctx, ProbeAttempt)
			c, err := Connect(attempt, socket, opts...)
			cancel()
			if err == nil {
				return c, nil
			}
			saw = "the socket is there; Probe: " + err.Error()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ssdcache-node did not answer Probe on %s: %w; last seen: %s", socket, ctx.Err(), saw)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
