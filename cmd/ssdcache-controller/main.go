// Command ssdcache-controller runs the cluster-wide CacheBinding reconcilers: it
// admits bindings to the node holding their volume within that node's cache
// capacity, and creates bindings for PVCs of caching StorageClasses.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/controller"
	"github.com/ssdcache/ssdcache/pkg/logging"
	"github.com/ssdcache/ssdcache/pkg/memlimit"
	"github.com/ssdcache/ssdcache/pkg/version"
)

type flags struct {
	metricsAddr, probeAddr  string
	leaderElect             bool
	leaderElectionNamespace string
	pendingResync           time.Duration
	agentLeaseNamespace     string
	agentGoneAfter          time.Duration
	printVersion            bool
	logging                 *logging.Options
}

func parseFlags() flags {
	var f flags
	f.logging = logging.AddFlags(flag.CommandLine)
	flag.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	flag.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so that only one replica reconciles at a time")
	flag.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; empty means the pod's namespace")
	flag.DurationVar(&f.pendingResync, "pending-resync", controller.DefaultPendingResync, "re-examine pending CacheBindings this often without an event")
	flag.StringVar(&f.agentLeaseNamespace, "agent-lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace where the node agents renew their Leases (the node DaemonSet's); defaults to $POD_NAMESPACE; empty never takes an agent as gone while its Node exists")
	flag.DurationVar(&f.agentGoneAfter, "agent-gone-after", controller.DefaultAgentGoneAfter, "a node agent whose Lease expired this long ago is gone: the finalizers of its node's CacheBindings are released")
	flag.BoolVar(&f.printVersion, "version", false, "print the version and exit")
	flag.Parse()
	return f
}

func main() {
	f := parseFlags()
	if f.printVersion {
		fmt.Println(version.Get().String("ssdcache-controller"))
		return
	}
	if err := run(f); err != nil {
		klog.ErrorS(err, "ssdcache-controller failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(f flags) error {
	if err := f.logging.Apply(); err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())
	// The informers' caches grow with the cluster's bindings, claims, PVs
	// and Nodes; a soft limit under the container's makes the GC work
	// harder before the OOM killer acts.
	memLimit, err := memlimit.Apply(os.Getenv, debug.SetMemoryLimit)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := ssdv1.AddToScheme(scheme); err != nil {
		return err
	}
	// The manager serves controller-runtime's registry on /metrics.
	if err := version.RegisterBuildInfo(ctrlmetrics.Registry, version.Get()); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.probeAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        "ssdcache-controller.ssdcache.io",
		LeaderElectionNamespace: f.leaderElectionNamespace,
		// Step down at once on SIGTERM so that a rolling update does not wait out the lease.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         controller.CacheOptions(),
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controller.Setup(ctx, mgr, controller.Options{PendingResync: f.pendingResync,
		AgentLeaseNamespace: f.agentLeaseNamespace, AgentGoneAfter: f.agentGoneAfter}); err != nil {
		return fmt.Errorf("setting up reconcilers: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	klog.InfoS("Starting ssdcache-controller", "version", version.Version, "metrics", f.metricsAddr, "probes", f.probeAddr, "leaderElect", f.leaderElect, "goMemoryLimit", memLimit.String())
	return mgr.Start(ctx)
}
