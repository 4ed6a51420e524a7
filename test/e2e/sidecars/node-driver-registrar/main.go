// Command node-driver-registrar is a TEST STAND-IN for the upstream CSI
// sidecar registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.14.0,
// whose module the Go module proxy does not serve. Only test/e2e runs it.
//
// Like upstream's default --mode=registration, it waits for the CSI socket,
// learns the driver name with GetPluginInfo and serves kubelet's plugin
// registration API on <plugin-registration-path>/<driver>-reg.sock, with
// /healthz on --http-endpoint. A failed registration exits 1 (kubelet
// restarts it); SIGTERM removes the socket and exits 0. Its flags are the
// upstream ones the chart passes, plus klog's; test/chart checks that the
// chart passes no other.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, "Invalid command line")
		klog.FlushAndExit(klog.ExitFlushTimeout, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	klog.InfoS("Starting node-driver-registrar stand-in", "upstreamVersion", "v2.14.0")
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "node-driver-registrar failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

type config struct {
	csiAddress, kubeletRegistrationPath, pluginRegistrationPath, httpEndpoint string
	timeout                                                                   time.Duration
}

// parseFlags parses the command line (without the program name) with
// upstream's flag names and defaults.
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("node-driver-registrar", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&cfg.csiAddress, "csi-address", "/run/csi/socket", "Path of the CSI driver socket.")
	fs.StringVar(&cfg.kubeletRegistrationPath, "kubelet-registration-path", "", "Path of the CSI driver socket on the host.")
	fs.StringVar(&cfg.pluginRegistrationPath, "plugin-registration-path", "/registration", "Kubelet's plugin registration directory.")
	fs.StringVar(&cfg.httpEndpoint, "http-endpoint", "", "TCP address of the /healthz server; empty disables it.")
	fs.DurationVar(&cfg.timeout, "timeout", time.Second, "Timeout of calls to the driver and of the /healthz check.")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if cfg.kubeletRegistrationPath == "" {
		return config{}, errors.New("--kubelet-registration-path is required")
	}
	return cfg, nil
}

// run registers the driver and serves until ctx ends; being stopped while
// still waiting for the driver is not an error.
func run(ctx context.Context, cfg config) error {
	driver, err := discoverDriverName(ctx, cfg.csiAddress, cfg.timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// The name kubelet's plugin watcher finds the driver by, as upstream builds it.
	socketPath := filepath.Join(cfg.pluginRegistrationPath, driver+"-reg.sock")
	lis, err := listenRegistrationSocket(socketPath)
	if err != nil {
		return err
	}
	// Stop closes lis, and closing a unix listener removes its socket, upon
	// which kubelet's plugin watcher deregisters the driver.
	server := grpc.NewServer()
	defer server.Stop()
	registerapi.RegisterRegistrationServer(server, &registrationServer{driver: driver, endpoint: cfg.kubeletRegistrationPath})
	failed := make(chan error, 2)
	go func() { failed <- fmt.Errorf("registration server stopped: %w", server.Serve(lis)) }()
	if cfg.httpEndpoint != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", healthz(socketPath, driver, cfg.timeout))
		srv := &http.Server{Addr: cfg.httpEndpoint, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			failed <- fmt.Errorf("/healthz server on %s stopped: %w", cfg.httpEndpoint, srv.ListenAndServe())
		}()
	}
	select {
	case err := <-failed:
		return err
	case <-ctx.Done():
		return nil
	}
}

// discoverDriverName waits for the CSI socket until ctx ends (the plugin
// container may create it later) and returns GetPluginInfo's name.
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

// listenRegistrationSocket listens at path, owner-only as upstream does. A
// socket already there is a killed predecessor's and is replaced; any other
// file makes Listen fail and is left alone.
func listenRegistrationSocket(path string) (net.Listener, error) {
	if info, err := os.Lstat(path); err == nil && info.Mode().Type() == fs.ModeSocket {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale registration socket: %w", err)
		}
	}
	oldMask := syscall.Umask(0o077)
	lis, err := net.Listen("unix", path)
	syscall.Umask(oldMask)
	if err != nil {
		return nil, fmt.Errorf("listen on registration socket: %w", err)
	}
	klog.InfoS("Registration server listening", "socketPath", path)
	return lis, nil
}

// registrationServer answers kubelet's plugin watcher.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string // endpoint: the CSI socket as kubelet sees it
}

func (s *registrationServer) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("Received GetInfo call", "driver", s.driver, "endpoint", s.endpoint)
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: s.driver, Endpoint: s.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil // the registration API versions upstream advertises
}

// NotifyRegistrationStatus exits 1 on a failed registration, as upstream
// does, so that kubelet restarts the container and registration starts over.
func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !status.PluginRegistered {
		klog.ErrorS(nil, "Registration failed, restarting registration container", "driver", s.driver, "kubeletError", status.Error)
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.InfoS("Plugin registered with kubelet", "driver", s.driver)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// healthz answers as upstream's /healthz: 404 without the registration
// socket, 500 unless it answers GetInfo with this driver's name, else 200 "ok".
func healthz(socketPath, driver string, timeout time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		code, body := http.StatusOK, "ok"
		if _, err := os.Stat(socketPath); errors.Is(err, fs.ErrNotExist) {
			code, body = http.StatusNotFound, "registration socket does not exist"
		} else if err := checkRegistrationSocket(req.Context(), socketPath, driver, timeout); err != nil {
			code, body = http.StatusInternalServerError, err.Error()
			klog.ErrorS(err, "Health check failed")
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// checkRegistrationSocket calls GetInfo on the registration socket, as kubelet would.
func checkRegistrationSocket(ctx context.Context, socketPath, driver string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := connection.Connect(ctx, socketPath, nil)
	if err != nil {
		return fmt.Errorf("error connecting to node-registrar socket %s: %w", socketPath, err)
	}
	defer func() { _ = conn.Close() }()
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("error getting info from node-registrar socket: %w", err)
	}
	if info.Name != driver {
		return fmt.Errorf("registration socket %s answers for driver %q, want %q", socketPath, info.Name, driver)
	}
	return nil
}
