package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/version"
)

func run(ctx context.Context, o options) error {
	m, err := registerMetrics(ctrlmetrics.Registry, o.nodeName)
	if err != nil {
		return err
	}
	if !o.agent {
		n, err := setUpNode(ctx, o, m, nil)
		if err != nil {
			return err
		}
		err = runStandalone(ctx, n, agentConfig(o, n, m), newMetricsEndpoint(o, n))
		markForCleanShutdown(n)
		return err
	}
	mgr, err := newManager(o)
	if err != nil {
		return err
	}
	n, err := setUpNode(ctx, o, m, mgr.GetEventRecorder(agent.EventSource))
	if err != nil {
		return err
	}
	err = runManager(ctx, o, mgr, n, agentConfig(o, n, m), newMetricsEndpoint(o, n))
	markForCleanShutdown(n)
	return err
}

// shutdownMarkTimeout bounds the marks at exit: an LVM listing per VG, a
// flush and a 4 KiB read per volume and one lvchange, and kubelet kills the
// pod 30 s after SIGTERM by default, of which the components' own stop
// takes some.
const shutdownMarkTimeout = 15 * time.Second

// markForCleanShutdown marks the live caches once every other component has
// stopped, so that a clean shutdown's removal of their devices brings them
// back warm after the reboot (cache.Engine.MarkCleanShutdown). A volume
// left unmarked (the timeout, an error) is filled from the HDD as before.
func markForCleanShutdown(n *node) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownMarkTimeout)
	defer cancel()
	marked, err := n.engine.MarkCleanShutdown(ctx, n.locks)
	if err != nil {
		klog.ErrorS(err, "Some caches could not be marked for a clean shutdown; a reboot fills them from the HDD")
	}
	klog.InfoS("Marked the live caches for a clean shutdown", "volumes", marked)
}

// setUpNode assembles the node and makes the first attempt at its pools
// before anything else runs: on a node whose disks are there, the agent,
// the monitor and the sweep of unclaimed caches start knowing the cache
// pool, as they always did. Later attempts run in the background.
func setUpNode(ctx context.Context, o options, m *agent.Metrics, rec events.EventRecorder) (*node, error) {
	n, err := newNode(o, m, rec)
	if err != nil {
		return nil, err
	}
	n.setup.Attempt(ctx)
	// A plugin of this boot that stopped before left marks on the caches it
	// could vouch for at a clean shutdown: they must go before any component
	// here can suspend a cache or drop one to linear (cache/shutdown.go).
	// A pool the attempt set up had them deleted (Engine.AddCachePool). LVM
	// that cannot see the VG yet (its devices not found) cannot show them
	// either: the pool's set-up deletes them once it can.
	if n.engine.Pools().HasCacheVG(o.cacheVG) {
		return n, nil
	}
	if err := n.engine.ForgetShutdownMarks(ctx, o.cacheVG); err != nil {
		klog.InfoS("Could not look for shutdown marks on the cache VG yet; they are deleted when its pool is set up", "vg", o.cacheVG, "err", err)
	}
	return n, nil
}

func agentConfig(o options, n *node, m *agent.Metrics) agent.Config {
	return agent.Config{NodeName: o.nodeName, Engine: n.engine, Dev: n.dev, Locks: n.locks, Metrics: m, Pools: n.pools,
		DeviceClass: n.deviceClass, HealthInterval: o.healthInterval, SampleInterval: o.sampleInterval,
		FiguresInterval: o.statusInterval, PromoteInterval: o.promoteInterval, VolumeEvents: n.volumeEvents, LeaseNamespace: o.leaseNamespace,
		Expander: n.driver.Controller, DriverName: o.driverName}
}

func newMetricsEndpoint(o options, n *node) *metricsEndpoint {
	return &metricsEndpoint{addr: o.metricsAddr, gatherer: nodeGatherer(n.csiMetrics)}
}

// registerMetrics puts the agent's cache series and ssdcache_build_info on
// reg, the registry that /metrics serves (nodeGatherer), each labelled with
// the node's name (agent.LabelNode).
func registerMetrics(reg prometheus.Registerer, nodeName string) (*agent.Metrics, error) {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{agent.LabelNode: nodeName}, reg)
	m, err := agent.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return m, version.RegisterBuildInfo(reg, version.Get())
}

// runStandalone serves CSI, the monitor and metrics without the Kubernetes
// API: for the kernel test suite and for debugging a node.
func runStandalone(ctx context.Context, n *node, cfg agent.Config, metrics *metricsEndpoint) error {
	klog.InfoS("Starting ssdcache-node without the CacheBinding agent", "version", version.Version)
	g, ctx := errgroup.WithContext(ctx)
	mon := agent.NewMonitor(n.engine, n.dev, n.locks, agent.NewSamples(), cfg.Metrics, agent.MonitorOptions{
		HealthInterval: cfg.HealthInterval, SampleInterval: cfg.SampleInterval})
	runnables := map[string]interface{ Start(context.Context) error }{"csi": n.driver, "pool-setup": n.setup, "pools": n.pools, "monitor": mon, "metrics": metrics}
	if p := cfg.Promoter(mon.CacheLost); p != nil {
		runnables["promoter"] = p
	}
	for name, r := range runnables {
		g.Go(func() error {
			err := r.Start(ctx)
			klog.V(2).InfoS("Stopped", "component", name, "err", err)
			return err
		})
	}
	return g.Wait()
}

func newManager(o options) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := ssdv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig (pass --agent=false to run without the API): %w", err)
	}
	return ctrl.NewManager(restCfg, ctrl.Options{Scheme: scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"}, // served by metricsEndpoint with the CSI series
		HealthProbeBindAddress: o.probeAddr,
		Cache:                  agent.CacheOptions(o.nodeName)})
}

func runManager(ctx context.Context, o options, mgr ctrl.Manager, n *node, cfg agent.Config, metrics *metricsEndpoint) error {
	for _, r := range []interface{ Start(context.Context) error }{n.driver, n.setup, n.pools, metrics} {
		if err := mgr.Add(runnable(r.Start)); err != nil {
			return err
		}
	}
	if err := agent.Setup(mgr, cfg); err != nil {
		return err
	}
	// Both checks read memory only: a probe on a busy node must never start,
	// wait for or kill an LVM or dm command. Readiness is the CSI Probe's
	// answer: false while the origin pool is not set up (its devices are
	// missing or refused; the set-up retries) or the last scan is stale.
	if err := mgr.AddHealthzCheck("csi", func(*http.Request) error { return n.driver.Serving() }); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("pools", func(*http.Request) error { return n.setup.Ready() }); err != nil {
		return err
	}
	klog.InfoS("Starting ssdcache-node", "version", version.Version, "node", o.nodeName)
	return mgr.Start(ctx)
}

type runnable func(context.Context) error

func (r runnable) Start(ctx context.Context) error { return r(ctx) }

// nodeGatherer is everything /metrics serves: the agent's and
// controller-runtime's series and the CSI call series.
func nodeGatherer(csiMetrics metrics.CSIMetricsManager) prometheus.Gatherer {
	return prometheus.Gatherers{ctrlmetrics.Registry, csiMetrics.GetRegistry()}
}

// metricsEndpoint serves the agent's cache series, controller-runtime's and
// csi-lib-utils' CSI operation series on one /metrics.
type metricsEndpoint struct {
	addr     string
	gatherer prometheus.Gatherer
}

func (m *metricsEndpoint) Start(ctx context.Context) error {
	if m.addr == "" {
		<-ctx.Done()
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: m.addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
