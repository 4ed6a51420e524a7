package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
)

// Config is the driver's identity and placement.
type Config struct {
	DriverName string
	Version    string
	NodeID     string
	// Endpoint is unix:///path/to/csi.sock.
	Endpoint          string
	MaxVolumesPerNode int64
	// LockWait bounds how long a node call waits while the node agent holds
	// its volume (attaching, resizing or warming its cache) before it
	// answers Aborted; 0 answers Aborted at once.
	LockWait time.Duration
}

// Deps are the layers the driver works through; tests pass fakes.
type Deps struct {
	Engine  *cache.Engine
	LVM     lvm.Interface
	Mounter mounter.Interface
	// Locks is shared with the node agent so the two never work on one volume at once.
	Locks *cache.VolumeLocks
	// Metrics records csi-lib-utils' per-operation metrics; nil disables them.
	Metrics metrics.CSIMetricsManager
	// Ready is the Probe check; nil means always ready. It must answer from
	// memory: Probe must never wait for LVM or the kernel.
	Ready func() error
	// Staged is told of every volume NodeStageVolume brought up, after its
	// lock is released: the node agent then attaches the cache its binding
	// asks for. NodeStage itself never attaches one. nil ignores it.
	Staged func(context.Context, StagedVolume)
}

// Driver is the CSI plugin: three services on one gRPC server.
type Driver struct {
	cfg        Config
	metrics    metrics.CSIMetricsManager
	Identity   *IdentityServer
	Controller *ControllerServer
	Node       *NodeServer
	// serving is true while the gRPC server accepts calls.
	serving atomic.Bool
}

// NewDriver assembles the services.
func NewDriver(cfg Config, deps Deps) (*Driver, error) {
	if cfg.DriverName == "" || cfg.NodeID == "" || cfg.Endpoint == "" {
		return nil, fmt.Errorf("driver name, node ID and endpoint are required (got %q, %q, %q)", cfg.DriverName, cfg.NodeID, cfg.Endpoint)
	}
	if deps.Engine == nil || deps.LVM == nil || deps.Mounter == nil || deps.Locks == nil {
		return nil, errors.New("driver dependencies engine, lvm, mounter and locks are all required")
	}
	staged := deps.Staged
	if staged == nil {
		staged = func(context.Context, StagedVolume) {}
	}
	return &Driver{
		cfg:      cfg,
		metrics:  deps.Metrics,
		Identity: &IdentityServer{name: cfg.DriverName, version: cfg.Version, ready: deps.Ready},
		Controller: &ControllerServer{nodeID: cfg.NodeID, originVG: deps.Engine.Pools().OriginVG,
			lvm: deps.LVM, engine: deps.Engine, locks: deps.Locks},
		Node: &NodeServer{nodeID: cfg.NodeID, maxVolumesPerNode: cfg.MaxVolumesPerNode, engine: deps.Engine,
			mounter: deps.Mounter, locks: deps.Locks, lockWait: cfg.LockWait, staged: staged},
	}, nil
}

// Start serves CSI on the endpoint until ctx ends; it is a controller-runtime Runnable.
func (d *Driver) Start(ctx context.Context) error {
	lis, err := listen(d.cfg.Endpoint)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(d.observe))
	csi.RegisterIdentityServer(srv, d.Identity)
	csi.RegisterControllerServer(srv, d.Controller)
	csi.RegisterNodeServer(srv, d.Node)
	go func() {
		<-ctx.Done()
		stopGracefully(srv, gracefulStopTimeout)
	}()
	klog.InfoS("Serving CSI", "endpoint", d.cfg.Endpoint, "driver", d.cfg.DriverName, "node", d.cfg.NodeID)
	d.serving.Store(true)
	defer d.serving.Store(false)
	return srv.Serve(lis)
}

// Serving is the liveness check: nil while the gRPC server accepts calls.
// It reads a flag only, so it answers at once on a node whose storage is slow.
func (d *Driver) Serving() error {
	if !d.serving.Load() {
		return errors.New("the CSI gRPC server is not serving")
	}
	return nil
}

// gracefulStopTimeout bounds waiting for in-flight calls at shutdown: a
// client that keeps its connection open must not keep the plugin running
// until kubelet kills it.
const gracefulStopTimeout = 10 * time.Second

// stopGracefully lets in-flight calls finish, then stops the server anyway.
func stopGracefully(srv *grpc.Server, timeout time.Duration) {
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(timeout):
		klog.InfoS("CSI calls still open at shutdown; stopping the server", "waited", timeout)
		srv.Stop()
	}
}

// listen opens the unix socket, replacing one a previous process left.
func listen(endpoint string) (net.Listener, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || path == "" {
		return nil, fmt.Errorf("endpoint %q: want unix:///path/to/socket", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return net.Listen("unix", path)
}

// observe logs every call with secrets stripped and records its metrics.
func (d *Driver) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	klog.V(4).InfoS("CSI request", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req))
	resp, err := handler(ctx, req)
	if d.metrics != nil {
		d.metrics.RecordMetrics(info.FullMethod, err, time.Since(start))
	}
	kv := []any{"method", info.FullMethod, "duration", time.Since(start)}
	if v, ok := req.(interface{ GetVolumeId() string }); ok && v.GetVolumeId() != "" {
		kv = append(kv, "volumeID", v.GetVolumeId())
	}
	if err != nil {
		klog.ErrorS(err, "CSI request failed", kv...)
	} else {
		klog.V(2).InfoS("CSI request done", kv...)
	}
	return resp, err
}
