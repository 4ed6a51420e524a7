package main

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

// registrar is one run of the sidecar.
type registrar struct {
	cfg  config
	exit func(code int)
}

func newRegistrar(cfg config, exit func(int)) *registrar {
	return &registrar{cfg: cfg, exit: exit}
}

// run waits for the CSI driver, then serves the registration socket (and
// /healthz on httpLis, if not nil) until ctx ends, when it removes the socket.
// Being stopped while still waiting for the driver is not an error.
func (r *registrar) run(ctx context.Context, httpLis net.Listener) error {
	driverName, err := sidecar.DiscoverDriverName(ctx, r.cfg.csiAddress, 0, r.cfg.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	socketPath, err := registrationSocketPath(r.cfg.pluginRegistrationPath, driverName)
	if err != nil {
		return err
	}
	regLis, err := listenRegistrationSocket(socketPath)
	if err != nil {
		return err
	}
	defer r.cleanup(socketPath)

	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, newRegistrationServer(driverName, r.cfg.kubeletRegistrationPath, r.exit))
	group, groupCtx := errgroup.WithContext(ctx)
	group.Go(func() error { return serveGRPC(groupCtx, server, regLis) })
	if httpLis != nil {
		health := &healthChecker{socketPath: socketPath, driverName: driverName, timeout: r.cfg.timeout}
		mux := http.NewServeMux()
		mux.Handle("/healthz", health)
		group.Go(func() error { return sidecar.ServeHTTP(groupCtx, httpLis, mux) })
	}
	return group.Wait()
}

// cleanup removes the registration socket so kubelet deregisters the plugin.
func (r *registrar) cleanup(socketPath string) {
	if err := removeSocket(socketPath); err != nil {
		klog.ErrorS(err, "Failed to remove registration socket")
		return
	}
	klog.InfoS("Removed registration socket", "socketPath", socketPath)
}

// serveGRPC serves until ctx ends; serving that stops earlier is an error.
func serveGRPC(ctx context.Context, server *grpc.Server, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- server.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("registration server on %s stopped: %w", lis.Addr(), err)
	case <-ctx.Done():
		server.Stop()
		<-served
		return nil
	}
}
