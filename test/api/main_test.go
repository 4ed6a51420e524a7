// Package api tests the CacheBinding CRD and ssdcache-controller on a real
// kube-apiserver and etcd started by controller-runtime's envtest. The binaries come
// from hack/envtest-assets.sh; run everything with hack/test-api.sh.
package api

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/controller"
)

// shared is the API server shared by all tests of the package; starting it
// takes seconds, so TestMain does it once, before any test runs.
var shared struct {
	env    *envtest.Environment
	client client.Client // uncached, so tests see the API server's truth
}

// needAPIServer skips a test when no API server was started.
func needAPIServer(t *testing.T) (context.Context, client.Client) {
	t.Helper()
	if shared.client == nil {
		t.Skip("API tests need a kube-apiserver: run hack/test-api.sh, which builds it and etcd and sets KUBEBUILDER_ASSETS (and do not pass -short)")
	}
	return t.Context(), shared.client
}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() || os.Getenv("KUBEBUILDER_ASSETS") == "" {
		os.Exit(m.Run())
	}
	os.Exit(runWithAPIServer(m))
}

// runWithAPIServer runs the tests against an API server with the CRDs and the
// controller's reconcilers running in-process.
func runWithAPIServer(m *testing.M) int {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), ssdv1.AddToScheme(scheme)); err != nil {
		return fail("scheme", err)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "deploy", "crd")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return fail("starting envtest", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fail("stopping envtest", err)
		}
	}()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fail("client", err)
	}
	// Leader election, probes and metrics are covered by TestControllerBinary,
	// which runs the real binary.
	ctrl.SetLogger(klog.NewKlogr())
	// The cache the binary runs with, so that every test sees the
	// controller through its trimmed copies.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0", Cache: controller.CacheOptions()})
	if err != nil {
		return fail("manager", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// A resync far beyond the tests' timeouts, so that they prove the watches work.
	if err := controller.Setup(ctx, mgr, controller.Options{PendingResync: time.Hour,
		AgentLeaseNamespace: agentLeaseNamespace, AgentGoneAfter: agentGoneAfter}); err != nil {
		cancel()
		return fail("controller", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fail("manager stopped", err)
		}
	}()
	defer func() { cancel(); <-done }()
	shared.env, shared.client = env, c
	return m.Run()
}

func fail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return 1
}
