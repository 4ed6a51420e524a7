// Package docs runs the commands of the README, the chart's README and
// docs/ as written, with the real kubectl and helm, against a real
// kube-apiserver (envtest): the install, the examples, the namespace limits,
// the bench report's retrieval and the uninstall. Every code block of those
// files is marked for this test (<!-- docs-test: NAME --> before it) or says
// why it is run elsewhere (<!-- docs-test: skip (REASON) -->), so a command
// added to the docs without a test fails here. No kubelet runs: what needs
// one (volume growth, the bench Job) is proven by the e2e.
package docs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const repo = "../.."

// docs are the files whose code blocks are tested.
var docs = []string{"README.md", "charts/ssdcache/README.md", "docs/bench.md"}

// promptRE is a shell prompt the docs show before a command.
var promptRE = regexp.MustCompile(`(?m)^\$ `)

func codeBlocks(t *testing.T, file string) []Block {
	t.Helper()
	blocks, err := CodeBlocks(repo, file)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestEveryCodeBlockIsTested: a block is run by TestDocsRunAsWritten, or its
// marker says where it is proven instead; a diagram says it is text.
func TestEveryCodeBlockIsTested(t *testing.T) {
	for _, file := range docs {
		for _, b := range codeBlocks(t, file) {
			if b.Lang == "text" {
				continue
			}
			if b.Marker == "" {
				t.Errorf("%s:%d: a %q code block without a <!-- docs-test: ... --> marker:\n%s", b.File, b.Line, b.Lang, b.Text)
			}
			if name := b.Marker; !strings.HasPrefix(name, "skip (") && !strings.HasPrefix(name, "same as ") && !sequenced(name) {
				t.Errorf("%s:%d: marker %q is not in this test's sequence", b.File, b.Line, name)
			}
		}
	}
}

// TestRepeatedBlocksAreTheSame: a block marked "same as NAME" repeats block
// NAME, which runs; they must not drift apart (comments aside).
func TestRepeatedBlocksAreTheSame(t *testing.T) {
	byName := map[string]Block{}
	var repeats []Block
	for _, file := range docs {
		for _, b := range codeBlocks(t, file) {
			if name, ok := strings.CutPrefix(b.Marker, "same as "); ok {
				b.Marker = name
				repeats = append(repeats, b)
			} else {
				byName[b.Marker] = b
			}
		}
	}
	for _, r := range repeats {
		orig, ok := byName[r.Marker]
		if !ok {
			t.Errorf("%s:%d: repeats block %q, which no file has", r.File, r.Line, r.Marker)
		} else if withoutComments(r.Text) != withoutComments(orig.Text) {
			t.Errorf("%s:%d differs from the %q block at %s:%d:\n%s\nthere:\n%s", r.File, r.Line, r.Marker, orig.File, orig.Line, r.Text, orig.Text)
		}
	}
}

// withoutComments drops shell comments and the spaces before them.
func withoutComments(script string) string {
	lines := strings.Split(script, "\n")
	for i, l := range lines {
		if before, _, ok := strings.Cut(l, " #"); ok {
			l = before
		}
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// sequence is the order the marked blocks run in, as a reader would: install,
// use, limit a namespace, read a bench report, uninstall.
var sequence = []string{"install", "node-groups", "storageclass", "cachebinding", "get-cachebindings", "namespace-limits", "bench-report", "uninstall-volumes", "uninstall"}

// valuesBlocks are YAML blocks of chart values rather than manifests: helm
// renders the chart with them (schema included).
var valuesBlocks = map[string]bool{"node-groups": true}

func sequenced(name string) bool { return slices.Contains(sequence, name) }

func TestDocsRunAsWritten(t *testing.T) {
	if testing.Short() || os.Getenv("KUBEBUILDER_ASSETS") == "" || os.Getenv("SSDCACHE_HELM") == "" {
		t.Skip("needs kube-apiserver, kubectl and helm: run hack/test-api.sh, which sets KUBEBUILDER_ASSETS and SSDCACHE_HELM")
	}
	sh := newShell(t)
	// The install adds the repository the fixture writes, as the README
	// says: served here in its placeholder's place.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	repository := ServeRepository(l, filepath.Join(sh.dir, "_output", "release"))
	t.Cleanup(func() { repository.Close() })
	blocks := map[string]Block{}
	for _, file := range docs {
		for _, b := range codeBlocks(t, file) {
			if sequenced(b.Marker) {
				blocks[b.Marker] = b
			}
		}
	}
	for _, name := range sequence {
		b, ok := blocks[name]
		if !ok {
			t.Fatalf("no block is marked %q", name)
		}
		if setUp := fixtures[name]; setUp != "" {
			sh.run(t, "fixture of "+name, setUp)
		}
		script := strings.ReplaceAll(b.Text, ChartRepoURL, repository.URL)
		switch {
		case valuesBlocks[name]:
			script = "helm template ssdcache _output/release/ssdcache-0.1.0.tgz --validate -n ssdcache-system -f - >/dev/null <<'EOF'\n" + b.Text + "EOF\n"
		case b.Lang == "yaml":
			script = "kubectl apply -f - <<'EOF'\n" + b.Text + "EOF\n"
		}
		out := sh.run(t, fmt.Sprintf("%s:%d (%s)", b.File, b.Line, name), promptRE.ReplaceAllString(script, ""))
		if check := checks[name]; check != nil {
			check(t, sh, out)
		}
		if name == "install" {
			for _, path := range []string{"/index.yaml", "/ssdcache-0.1.0.tgz"} {
				if !repository.Served(path) {
					t.Errorf("the install did not fetch %s from the repository %s (served: %q)", path, repository.URL, repository.Paths())
				}
			}
		}
	}
}

// fixtures make what a block expects to find in a cluster: the nodes with
// disks, the namespaces of the examples, a bench report.
var fixtures = map[string]string{
	"install": `kubectl create -f - <<'EOF'
apiVersion: v1
kind: Node
metadata: {name: storage-1}
---
apiVersion: v1
kind: Node
metadata: {name: storage-2}
EOF
mkdir -p _output/release
helm package ` + repo + `/charts/ssdcache --version 0.1.0 --app-version 0.1.0 -d _output/release >/dev/null
helm repo index _output/release
`,
	"namespace-limits": "kubectl create namespace team-a\n",
	"uninstall-volumes": `kubectl create namespace app
kubectl apply -f - <<'EOF'
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: app}
spec:
  storageClassName: ssdcache-cached
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
EOF
# No kube-controller-manager runs here: do what its pvc-protection
# controller does for a claim no pod uses.
kubectl -n app patch pvc data --type=json -p '[{"op": "remove", "path": "/metadata/finalizers"}]'
`,
	"bench-report": `kubectl -n ssdcache-system create configmap ssdcache-bench-report \
  --from-literal=report.md='# ssdcache-bench report' --from-literal=report.json='{"convergence":[]}' --from-literal=convergence.svg='<svg/>'
`,
}

// checks look at what a block did, beyond its commands' exit codes.
var checks = map[string]func(t *testing.T, sh *shell, out string){
	"install": func(t *testing.T, sh *shell, _ string) {
		labels := sh.run(t, "node labels", "kubectl get nodes -l ssdcache.io/node=true -o name")
		if strings.Count(labels, "node/") != 2 {
			t.Errorf("labelled nodes: %q, want storage-1 and storage-2", labels)
		}
		ds := sh.run(t, "DaemonSet", "kubectl -n ssdcache-system get daemonset ssdcache-node -o jsonpath='{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].args}'")
		for _, want := range []string{"registry.example.com/ssdcache:0.1.0", "/dev/disk/by-id/ata-ST4000NM*", "/dev/disk/by-id/nvme-Samsung_SSD_980*"} {
			if !strings.Contains(ds, want) {
				t.Errorf("the installed DaemonSet lacks %q: %s", want, ds)
			}
		}
	},
	"get-cachebindings": func(t *testing.T, _ *shell, out string) {
		if !strings.Contains(out, "postgres-data") || !strings.Contains(out, "PHASE") {
			t.Errorf("kubectl get cachebindings:\n%s\nwant the README's binding under the printer columns", out)
		}
	},
	"bench-report": func(t *testing.T, _ *shell, out string) {
		if !strings.Contains(out, "# ssdcache-bench report") || !strings.Contains(out, "[]") {
			t.Errorf("the bench report commands printed %q", out)
		}
	},
	"uninstall": func(t *testing.T, sh *shell, _ string) {
		if left := sh.run(t, "after uninstall", "helm list -A -q; kubectl get cachebindings -A -o name; kubectl -n ssdcache-system get daemonsets -o name"); strings.TrimSpace(left) != "" {
			t.Errorf("left after the uninstall: %q", left)
		}
	},
}

// shell runs bash in a work directory with kubectl and helm on PATH and a
// kubeconfig for the test's API server.
type shell struct {
	dir string
	env []string
}

func newShell(t *testing.T) *shell {
	t.Helper()
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(repo, "deploy", "crd")}, ErrorIfCRDPathMissing: true}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "docs-reader", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("KUBEBUILDER_ASSETS") + ":" + filepath.Dir(os.Getenv("SSDCACHE_HELM")) + ":" + os.Getenv("PATH")
	repoAbs, err := filepath.Abs(repo)
	if err != nil {
		t.Fatal(err)
	}
	return &shell{dir: dir, env: append(os.Environ(), "PATH="+path, "KUBECONFIG="+filepath.Join(dir, "kubeconfig"),
		"HELM_CACHE_HOME="+filepath.Join(dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(dir, "helm"), "HELM_DATA_HOME="+filepath.Join(dir, "helm"),
		"REPO="+repoAbs)}
}

// run runs script with bash -euo pipefail and returns its output; a failing
// script fails the test with what it printed.
func (s *shell) run(t *testing.T, what, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", strings.ReplaceAll(script, repo+"/", "$REPO/"))
	cmd.Dir, cmd.Env = s.dir, s.env
	// A command left waiting (kubectl delete --wait) goes with the script.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n--- script\n%s--- output\n%s", what, err, script, out.String())
	}
	return out.String()
}
