// Package api tests the CacheBinding CRD and ssdcache-controller on a real
// kube-apiserver and etcd started by controller-runtime's envtest. The binaries come
// from hack/envtest-assets.sh; run everything with hack/test-api.sh.
package api

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/controller"
)

// suite is the API server and controller shared by all tests of the package; starting
// them takes seconds, so they are started once in TestMain.
type suite struct {
	env     *envtest.Environment
	client  client.Client // uncached, so tests see the API server's truth
	scheme  *runtime.Scheme
	skipWhy string
}

var shared suite

// needAPIServer skips a test when no API server could be started.
func needAPIServer(t *testing.T) (context.Context, client.Client) {
	t.Helper()
	if shared.skipWhy != "" {
		t.Skip(shared.skipWhy)
	}
	return t.Context(), shared.client
}

func TestMain(m *testing.M) {
	flag.Parse()
	switch {
	case testing.Short():
		shared.skipWhy = "API tests need a kube-apiserver; skipped under -short (run hack/test-api.sh)"
	case os.Getenv("KUBEBUILDER_ASSETS") == "":
		shared.skipWhy = "KUBEBUILDER_ASSETS is unset: run hack/test-api.sh, which builds kube-apiserver and etcd and sets it"
	}
	if shared.skipWhy != "" {
		os.Exit(m.Run())
	}
	stop, err := startSuite()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func startSuite() (stop func(), err error) {
	shared.scheme = runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(shared.scheme); err != nil {
		return nil, err
	}
	if err := ssdv1.AddToScheme(shared.scheme); err != nil {
		return nil, err
	}
	shared.env = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                shared.scheme,
	}
	cfg, err := shared.env.Start()
	if err != nil {
		return nil, err
	}
	shared.client, err = client.New(cfg, client.Options{Scheme: shared.scheme})
	if err != nil {
		_ = shared.env.Stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, err := startController(ctx, cfg)
	if err != nil {
		cancel()
		_ = shared.env.Stop()
		return nil, err
	}
	return func() {
		cancel()
		<-done
		if err := shared.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}, nil
}

// startController runs ssdcache-controller's reconcilers in-process; leader election,
// probes and metrics are covered by TestControllerBinary, which runs the real binary.
func startController(ctx context.Context, cfg *rest.Config) (<-chan struct{}, error) {
	ctrl.SetLogger(klog.NewKlogr())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 shared.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	// A resync far beyond the tests' timeouts, so that they prove the watches work.
	if err := controller.Setup(ctx, mgr, controller.Options{PendingResync: time.Hour,
		AgentLeaseNamespace: agentLeaseNamespace, AgentGoneAfter: agentGoneAfter}); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	return done, nil
}
