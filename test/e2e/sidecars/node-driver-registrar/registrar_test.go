package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"
)

const (
	testDriver  = "ssdcache.io"
	kubeletPath = "/var/lib/kubelet/plugins/ssdcache.io/csi.sock"
	waitBound   = 30 * time.Second // generous bound on waits, never a pass/fail timing
	// runMainEnv makes the test binary run main() instead of the tests, so
	// that flags, signals and exit codes are tested as shipped.
	runMainEnv = "NODE_DRIVER_REGISTRAR_RUN_MAIN"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"node-driver-registrar"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func registrarCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// chartRegistrarContainer renders the chart with its default values, as
// `helm template` would, and returns the node DaemonSet's registrar container.
func chartRegistrarContainer(t *testing.T) corev1.Container {
	t.Helper()
	ch, err := loader.Load("../../../../charts/ssdcache")
	if err != nil {
		t.Fatal(err)
	}
	release := chartutil.ReleaseOptions{Name: "ssd", Namespace: "ssdcache-system", IsInstall: true, Revision: 1}
	values, err := chartutil.ToRenderValues(ch, map[string]any{}, release, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, values)
	if err != nil {
		t.Fatal(err)
	}
	manifest := files["ssdcache/templates/node-daemonset.yaml"]
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal([]byte(manifest), &ds); err != nil {
		t.Fatal(err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "node-driver-registrar" {
			return c
		}
	}
	t.Fatalf("the chart's node DaemonSet has no node-driver-registrar container:\n%s", manifest)
	return corev1.Container{}
}

// TestChartCommandLine: every flag the chart passes is one the stand-in takes,
// and its value reaches the setting upstream gives it.
func TestChartCommandLine(t *testing.T) {
	c := chartRegistrarContainer(t)
	t.Logf("the chart's registrar args: %q", c.Args)
	cfg, err := parseFlags(c.Args)
	if err != nil {
		t.Fatalf("the chart's args %q: %v", c.Args, err)
	}
	got := map[string]string{"csi-address": cfg.csiAddress, "kubelet-registration-path": cfg.kubeletRegistrationPath,
		"plugin-registration-path": cfg.pluginRegistrationPath, "http-endpoint": cfg.httpEndpoint}
	for _, arg := range c.Args {
		name, value, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if field, ok := got[name]; ok && field != value {
			t.Errorf("%s gives %q, want %q", arg, field, value)
		}
		if timeout, err := time.ParseDuration(value); name == "timeout" && (err != nil || timeout != cfg.timeout) {
			t.Errorf("%s gives timeout %s", arg, cfg.timeout)
		}
	}
}

// fakeDriver is all of a CSI driver the registrar asks: GetPluginInfo.
type fakeDriver struct {
	csi.UnimplementedIdentityServer
}

func (fakeDriver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: testDriver, VendorVersion: "test"}, nil
}

// startRegistrar runs main() in a child process against a fake driver, where
// a killed predecessor left its socket, and connects to it as kubelet would.
func startRegistrar(t *testing.T) (cmd *exec.Cmd, client registerapi.RegistrationClient, socketPath, healthURL string) {
	t.Helper()
	dir := t.TempDir()
	csiLis, err := net.Listen("unix", filepath.Join(dir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	driver := grpc.NewServer()
	csi.RegisterIdentityServer(driver, fakeDriver{})
	go func() { _ = driver.Serve(csiLis) }()
	t.Cleanup(driver.Stop)

	socketPath = filepath.Join(dir, testDriver+"-reg.sock")
	stale, err := net.Listen("unix", socketPath)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close()

	httpLis, err := net.Listen("tcp", "127.0.0.1:0") // a port free a moment ago
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := httpLis.Addr().String()
	_ = httpLis.Close()
	cmd = registrarCommand("--csi-address="+csiLis.Addr().String(), "--kubelet-registration-path="+kubeletPath,
		"--plugin-registration-path="+dir, "--http-endpoint="+httpAddr, "--timeout=5s", "--v=5")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start registrar process: %v", err)
	}
	// One that does not exit when it should is killed, which its exit code then shows.
	killer := time.AfterFunc(waitBound, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() { killer.Stop(); _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// Retried until the registrar has replaced the stale socket.
	conn, err := connection.Connect(context.Background(), socketPath, nil, connection.WithTimeout(waitBound))
	if err != nil {
		t.Fatalf("connect to registration socket: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cmd, registerapi.NewRegistrationClient(conn), socketPath, "http://" + httpAddr + "/healthz"
}

// TestKubeletRegistersTheDriver plays kubelet's side of plugin registration
// and the liveness probe, then stops the registrar as kubelet does.
func TestKubeletRegistersTheDriver(t *testing.T) {
	cmd, client, socketPath, healthURL := startRegistrar(t)
	ctx := context.Background()
	info, err := client.GetInfo(ctx, &registerapi.InfoRequest{})
	want := &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: testDriver, Endpoint: kubeletPath, SupportedVersions: []string{"1.0.0"}}
	if err != nil || !proto.Equal(info, want) {
		t.Fatalf("GetInfo = %v, %v; want %v", info, err, want)
	}
	resp, err := (&http.Client{Timeout: waitBound}).Get(healthURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // a short read shows as a wrong body
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\"", resp.StatusCode, body)
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(registered): %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit code 0", err)
	}
	if _, err := os.Lstat(socketPath); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after SIGTERM (lstat: %v)", err)
	}
}
