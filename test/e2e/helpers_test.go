package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// testLogger logs at klog's level 4 and below: level 5 is the NBD server's
// line per disk request, hundreds a second over the whole test.
func testLogger(t *testing.T) klog.Logger {
	return ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4)))
}

func (s *suite) kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.c.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// brokenStream marks kubectl exec errors of the connection, not of the
// command: a busy node's kubelet or API server dropped the stream.
var brokenStream = []string{"websocket: close", "error reading from error stream", "error dialing backend", "connection reset by peer"}

// exec runs an idempotent bash script in a pod of the default namespace; a
// stream the busy node dropped is retried (3 attempts), a failing script is not.
func (s *suite) exec(ctx context.Context, t *testing.T, pod, script string) {
	t.Helper()
	var err error
	for range 3 {
		if _, err = s.c.Kubectl(ctx, "-n", "default", "exec", pod, "--", "bash", "-c", script); err == nil {
			return
		}
		if !slices.ContainsFunc(brokenStream, func(m string) bool { return strings.Contains(err.Error(), m) }) {
			break
		}
		t.Logf("kubectl exec %s: the stream broke, trying again: %v", pod, err)
	}
	t.Fatal(err)
}

func (s *suite) apply(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	if _, err := s.c.KubectlStdin(ctx, manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// jsonpath reads one field of an object ("" when it is not there).
func (s *suite) jsonpath(ctx context.Context, t *testing.T, obj, path string, extra ...string) string {
	t.Helper()
	return strings.TrimSpace(s.kubectl(ctx, t, append([]string{"get", obj, "-o", "jsonpath=" + path}, extra...)...))
}

// node runs a script on the node (in the guest, as root) and fails the test on error.
func (s *suite) node(ctx context.Context, t *testing.T, script string) string {
	t.Helper()
	out, err := s.c.NodeExec(ctx, script)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *suite) dmTable(ctx context.Context, t *testing.T, volumeHandle string) string {
	t.Helper()
	return strings.TrimSpace(s.node(ctx, t, "dmsetup table ssdcache-"+volumeHandle))
}

// volumeHandle is the CSI volume ID of a bound PVC in namespace default.
func (s *suite) volumeHandle(ctx context.Context, t *testing.T, pvc string) string {
	t.Helper()
	pv := s.jsonpath(ctx, t, "pvc/"+pvc, "{.spec.volumeName}", "-n", "default")
	if pv == "" {
		t.Fatalf("PVC %s is not bound", pvc)
	}
	return s.jsonpath(ctx, t, "pv/"+pv, "{.spec.csi.volumeHandle}")
}

// dumpState logs what a failed step leaves behind: objects, events, the node
// plugin's logs, and where the daemons' logs are.
func (s *suite) dumpState(ctx context.Context, t *testing.T) {
	if s.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"get", "nodes,pods,pvc,pv,cachebindings,jobs", "-A", "-o", "wide"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"-n", namespace, "logs", "-l", "app.kubernetes.io/component=node", "--all-containers", "--tail=60", "--prefix"},
		{"-n", namespace, "logs", "-l", "app.kubernetes.io/component=controller", "--tail=40"},
	} {
		out, err := s.c.Kubectl(ctx, args...)
		t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrEmpty(err))
	}
	out, err := s.c.NodeExec(ctx, "dmsetup table; lvs -a 2>&1; tail -n 30 /vmwork/logs/kubelet.log")
	t.Logf("node: dm tables, LVs, kubelet log:\n%s%v", out, errOrEmpty(err))
	t.Logf("logs: %s", strings.Join(s.c.Logs(), " "))
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return "error: " + err.Error()
}
