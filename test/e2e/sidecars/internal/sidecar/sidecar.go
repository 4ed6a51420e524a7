// Package sidecar holds what the stand-in CSI sidecars share: the klog flags,
// finding the driver behind a CSI socket, and serving HTTP until told to stop.
package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

const (
	// shutdownGrace bounds how long in-flight HTTP requests may finish after a stop.
	shutdownGrace = 5 * time.Second
	// stillConnectingInterval is how often a wait for the CSI socket is logged.
	stillConnectingInterval = 10 * time.Second
)

// NewFlagSet returns a flag set that already carries klog's flags (--v and
// friends), as the upstream sidecars' command lines do.
func NewFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}

// ParseFlags parses args (without the program name) into fs; like the
// upstream sidecars, everything is a flag.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: only flags are allowed", fs.Args())
	}
	return nil
}

// Connect dials a CSI endpoint ("/path" or "unix:///path") and blocks until
// the connection is ready, for at most connectTimeout (0: until ctx ends). The
// plugin container may start after the sidecar, so waiting is the normal case.
func Connect(ctx context.Context, csiAddress string, connectTimeout time.Duration) (*grpc.ClientConn, error) {
	if connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, connectTimeout)
		defer cancel()
	}
	backoffConfig := backoff.DefaultConfig
	backoffConfig.MaxDelay = time.Second // retry a missing socket every second, as csi-lib-utils does
	conn, err := grpc.NewClient(grpcTarget(csiAddress),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoffConfig}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to CSI driver at %q: %w", csiAddress, err)
	}
	if err := waitUntilReady(ctx, conn, csiAddress); err != nil {
		CloseConn(conn, csiAddress)
		return nil, fmt.Errorf("connect to CSI driver at %q: %w", csiAddress, err)
	}
	return conn, nil
}

// grpcTarget turns a socket path into a gRPC target; other targets pass through.
func grpcTarget(address string) string {
	if strings.HasPrefix(address, "/") {
		return "unix://" + address
	}
	return address
}

// waitUntilReady starts connecting and waits for the Ready state, logging
// now and then so that a plugin that never comes up shows in the log.
func waitUntilReady(ctx context.Context, conn *grpc.ClientConn, address string) error {
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			// A new channel, or one whose connection dropped, waits to be told to connect.
			conn.Connect()
		}
		waitCtx, cancel := context.WithTimeout(ctx, stillConnectingInterval)
		changed := conn.WaitForStateChange(waitCtx, state)
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("not ready (last state %s): %w", state, err)
		}
		if !changed {
			klog.InfoS("Still connecting", "address", address, "state", state.String())
		}
	}
}

// DiscoverDriverName waits for the CSI endpoint (see Connect) and returns the
// name its GetPluginInfo reports; the call itself gets callTimeout.
func DiscoverDriverName(ctx context.Context, csiAddress string, connectTimeout, callTimeout time.Duration) (string, error) {
	klog.V(1).InfoS("Connecting to the CSI driver", "address", csiAddress)
	conn, err := Connect(ctx, csiAddress, connectTimeout)
	if err != nil {
		return "", err
	}
	defer CloseConn(conn, csiAddress)

	callCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	name, err := rpc.GetDriverName(callCtx, conn)
	if err != nil {
		return "", fmt.Errorf("GetPluginInfo of CSI driver at %q: %w", csiAddress, err)
	}
	klog.InfoS("Discovered CSI driver", "address", csiAddress, "driver", name)
	return name, nil
}

// CloseConn closes a gRPC client connection, logging (not failing) on error.
func CloseConn(conn *grpc.ClientConn, address string) {
	if err := conn.Close(); err != nil {
		klog.ErrorS(err, "Closing gRPC connection failed", "address", address)
	}
}

// ServeHTTP serves handler on lis until ctx ends, then shuts down gracefully.
// It returns an error only when serving stops for another reason.
func ServeHTTP(ctx context.Context, lis net.Listener, handler http.Handler) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	klog.InfoS("Serving HTTP", "address", lis.Addr().String())
	go func() { served <- srv.Serve(lis) }()

	select {
	case err := <-served:
		return fmt.Errorf("HTTP server on %s stopped: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("HTTP server on %s: shutdown: %w", lis.Addr(), err)
	}
	return nil
}

// ListenHTTP opens the TCP listener for an --http-endpoint value such as ":9808".
func ListenHTTP(flagName, endpoint string) (net.Listener, error) {
	lis, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: cannot listen (want host:port, e.g. \":9808\"): %w", flagName, endpoint, err)
	}
	return lis, nil
}
