package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// run waits for the CSI driver, then serves the registration socket (and
// /healthz on httpLis, if not nil) until ctx ends, when it removes the socket.
// Being stopped while still waiting for the driver is not an error.
func run(ctx context.Context, cfg config, httpLis net.Listener) error {
	driverName, err := discoverDriverName(ctx, cfg.csiAddress, cfg.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// The name kubelet's plugin watcher finds the driver by, as upstream builds it.
	socketPath := filepath.Join(cfg.pluginRegistrationPath, driverName+"-reg.sock")
	regLis, err := listenRegistrationSocket(socketPath)
	if err != nil {
		return err
	}
	// server.Stop closes regLis, and closing a unix listener removes its
	// socket, upon which kubelet's plugin watcher deregisters the driver.
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, &registrationServer{driverName: driverName, endpoint: cfg.kubeletRegistrationPath})
	group, groupCtx := errgroup.WithContext(ctx)
	group.Go(func() error {
		return serveUntilDone(groupCtx, "registration server", func() error { return server.Serve(regLis) }, server.Stop)
	})
	if httpLis != nil {
		health := &healthChecker{socketPath: socketPath, driverName: driverName, timeout: cfg.timeout}
		group.Go(func() error { return serveHealthz(groupCtx, httpLis, health) })
	}
	return group.Wait()
}

// discoverDriverName waits for the CSI socket until ctx ends (the plugin
// container may create it after this one starts) and returns the driver name
// GetPluginInfo reports; the call itself gets callTimeout.
func discoverDriverName(ctx context.Context, csiAddress string, callTimeout time.Duration) (string, error) {
	// WithTimeout(0) lifts csi-lib-utils' 30s limit on the wait, leaving ctx to end it.
	conn, err := connection.Connect(ctx, csiAddress, nil, connection.WithTimeout(0))
	if err != nil {
		return "", fmt.Errorf("connect to CSI driver at %q: %w", csiAddress, err)
	}
	defer func() { _ = conn.Close() }()

	callCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	name, err := rpc.GetDriverName(callCtx, conn)
	if err != nil {
		return "", fmt.Errorf("GetPluginInfo of CSI driver at %q: %w", csiAddress, err)
	}
	klog.InfoS("Discovered CSI driver", "address", csiAddress, "driver", name)
	return name, nil
}

// serveUntilDone runs serve until ctx ends, then stop. Both servers are meant
// to run until the signal, so serve returning first is an error.
func serveUntilDone(ctx context.Context, what string, serve func() error, stop func()) error {
	served := make(chan error, 1)
	go func() { served <- serve() }()
	select {
	case err := <-served:
		return fmt.Errorf("%s stopped: %w", what, err)
	case <-ctx.Done():
		stop()
		<-served
		return nil
	}
}

// registrationServer answers kubelet's plugin watcher.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	driverName string
	endpoint   string // the CSI socket as kubelet sees it
}

// GetInfo tells kubelet which CSI driver this is and where its socket is.
func (s *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("Received GetInfo call", "driver", s.driverName, "endpoint", s.endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driverName,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{"1.0.0"}, // the registration API versions upstream advertises
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict. On failure it exits 1, as
// upstream does, so that kubelet restarts the container and registration is
// tried again from scratch.
func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !status.PluginRegistered {
		klog.ErrorS(nil, "Registration failed, restarting registration container", "driver", s.driverName, "kubeletError", status.Error)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.InfoS("Plugin registered with kubelet", "driver", s.driverName)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// listenRegistrationSocket listens on a new socket at path that only its owner
// may use (kubelet runs as root), as upstream does. A socket already there is
// a killed predecessor's and is replaced; any other file there is an error,
// never deleted.
func listenRegistrationSocket(path string) (net.Listener, error) {
	stale, err := socketExists(path)
	if err != nil {
		return nil, err
	}
	if stale {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale registration socket %s: %w", path, err)
		}
		klog.InfoS("Removed stale registration socket", "socketPath", path)
	}
	oldMask := syscall.Umask(0o077)
	lis, err := net.Listen("unix", path)
	syscall.Umask(oldMask)
	if err != nil {
		return nil, fmt.Errorf("listen on registration socket %s: %w", path, err)
	}
	klog.InfoS("Registration server listening", "socketPath", path)
	return lis, nil
}

// socketExists reports whether path is a socket; another kind of file is an error.
func socketExists(path string) (bool, error) {
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect registration socket %s: %w", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return false, fmt.Errorf("registration socket path %s is not a socket (mode %s)", path, info.Mode())
	}
	return true, nil
}
