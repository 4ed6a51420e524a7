package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// TestControllerBinary runs the real ssdcache-controller binary as an unprivileged
// user holding only the ClusterRole generated from the controller's RBAC markers:
// it must elect itself leader, serve its probes and metrics, and reconcile a binding
// without a single "forbidden" from the API server.
func TestControllerBinary(t *testing.T) {
	ctx, c := needAPIServer(t)
	rolePath := os.Getenv("SSDCACHE_CONTROLLER_ROLE")
	if rolePath == "" {
		t.Skip("SSDCACHE_CONTROLLER_ROLE is unset: hack/test-api.sh sets it to deploy/rbac/controller/role.yaml, the ClusterRole generated from the controller's RBAC markers")
	}
	bin := buildController(t)
	user := grantRole(t, ctx, c, rolePath)
	kubeconfig := writeKubeconfig(t, user)
	ns := newNamespace(t, ctx, c)
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	logs := runController(t, bin, kubeconfig,
		"--leader-election-namespace="+ns, "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address="+probeAddr)

	eventually(t, "readyz", func(ctx context.Context) error { _, err := httpGet(ctx, "http://"+probeAddr+"/readyz"); return err })
	eventually(t, "leader lease in "+ns, func(ctx context.Context) error {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ssdcache-controller.ssdcache.io"}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease has no holder")
		}
		return nil
	})

	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	createBinding(t, ctx, c, ns, "cache", "data", "1Gi")
	waitAdmitted(t, c, ns, "cache", node, 1<<30)
	// The in-process controller admits it too; the binary's metrics prove it did its share.
	eventually(t, "binary reconciled CacheBindings", func(ctx context.Context) error {
		return checkReconciled(ctx, "http://"+metricsAddr+"/metrics")
	})
	if out := logs.String(); strings.Contains(out, "forbidden") {
		t.Errorf("the controller was refused by the API server with its generated RBAC:\n%s", grepLines(out, "forbidden"))
	}
}

func buildController(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ssdcache-controller")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ssdcache-controller")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// grantRole creates the generated ClusterRole under a test name and binds a new user to it.
func grantRole(t *testing.T, ctx context.Context, c client.Client, rolePath string) *envtest.AuthenticatedUser {
	t.Helper()
	data, err := os.ReadFile(rolePath)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatalf("%s: %v", rolePath, err)
	}
	name := uniqueName("ssdcache-controller")
	role.Name = name
	return newUser(t, ctx, c, name, role, clusterRoleBinding(name))
}

// newUser creates objs (the user's roles and bindings) and a user called name.
func newUser(t *testing.T, ctx context.Context, c client.Client, name string, objs ...client.Object) *envtest.AuthenticatedUser {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	user, err := shared.env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// clusterRoleBinding binds the user name to the ClusterRole of the same name.
func clusterRoleBinding(name string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: userSubject(name),
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}}
}

func userSubject(name string) []rbacv1.Subject {
	return []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
}

func writeKubeconfig(t *testing.T, user *envtest.AuthenticatedUser) string {
	t.Helper()
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// syncBuffer collects the process's output while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func runController(t *testing.T, bin, kubeconfig string, args ...string) *syncBuffer {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(bin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("ssdcache-controller output:\n%s", logs.String())
		}
	})
	return logs
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return string(body), err
}

var successfulReconciles = regexp.MustCompile(`(?m)^controller_runtime_reconcile_total\{controller="cachebinding",result="success"\} (\d+)$`)

func checkReconciled(ctx context.Context, url string) error {
	body, err := httpGet(ctx, url)
	if err != nil {
		return err
	}
	m := successfulReconciles.FindStringSubmatch(body)
	if m == nil {
		return fmt.Errorf("no successful cachebinding reconcile counter in the metrics")
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		return fmt.Errorf("no successful cachebinding reconcile yet")
	}
	return nil
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
