// Package cluster runs a one-node Kubernetes for the end-to-end tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler on the host, in a
// network namespace the test creates, and containerd, kubelet and kube-proxy
// in a qemu guest (test/vm) whose only NIC is a tap device in that namespace.
// Every packet stays inside the namespace or the guest. Images come from OCI
// archives imported into the guest's containerd; nothing is pulled.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm"
)

// Config describes the cluster to start.
type Config struct {
	// WorkDir holds the VM's disks, the PKI, etcd's data and every log.
	WorkDir string
	// Bin holds kubelet, kube-proxy, kube-controller-manager,
	// kube-scheduler, containerd (+shim, ctr) and helm (hack/e2e-assets.sh).
	Bin string
	// EnvtestBin holds etcd, kube-apiserver and kubectl (hack/envtest-assets.sh).
	EnvtestBin string
	// Images are OCI archives imported into the node's containerd.
	Images []string
	// PauseImage is the sandbox image's reference, PauseArchive its archive
	// (imported first, before kubelet starts).
	PauseImage, PauseArchive string
	// VM sizes the guest; WorkDir, Network and Logger are set by the cluster.
	VM     vm.Config
	Logger klog.Logger
}

// Cluster is a running one-node cluster.
type Cluster struct {
	cfg     Config
	logDir  string
	ns      *Netns
	daemons []*daemon // the control plane, in order of start
	boot    *vm.Boot
	started bool // Start has returned it: Poll no longer looks for a soft lockup
	cmdSeq  atomic.Int64
}

// Start brings the cluster up to a Ready node, step by step; the guest boots
// (slow under emulation) while the control plane starts. On error everything
// already started is stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, logDir: filepath.Join(cfg.WorkDir, "vm", "share", "logs")}
	for _, step := range []func(context.Context) error{c.prepare, c.createNetns, c.bootNode,
		c.startControlPlane, c.waitNodeReady, c.waitImages, c.waitServiceIP} {
		if err := step(ctx); err != nil {
			err = fmt.Errorf("%w\n%s", err, c.startReport())
			c.Stop()
			return nil, err
		}
	}
	c.started = true
	return c, nil
}

// startReport is the end of the apiserver's log, the node script's output
// and kubelet's and containerd's logs, for a failed start: the work dir is
// usually gone by the time anyone looks.
func (c *Cluster) startReport() string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(c.logDir, "kube-apiserver.log"), filepath.Join(c.shareDir(), ".vm", "stdout"),
		filepath.Join(c.shareDir(), ".vm", "boot.log"), filepath.Join(c.logDir, "kubelet.log"), filepath.Join(c.logDir, "containerd.log")} {
		last, err := lastLines(f, 15)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "--- last lines of %s:\n%s\n", filepath.Base(f), last)
	}
	return b.String()
}

// prepare fills the share dir: the PKI, the image archives, the node's configs.
func (c *Cluster) prepare(context.Context) error {
	share := c.shareDir()
	for _, d := range []string{c.logDir, filepath.Join(share, "cmd"), filepath.Join(share, "images")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := writePKI(c.pki(""), "https://"+HostIP+":6443", NodeName, net.ParseIP(HostIP)); err != nil {
		return fmt.Errorf("PKI: %w", err)
	}
	if err := linkOrCopy(c.cfg.PauseArchive, filepath.Join(share, "images", "pause.tar")); err != nil {
		return err
	}
	for _, img := range c.cfg.Images {
		if img == c.cfg.PauseArchive {
			continue
		}
		if err := linkOrCopy(img, filepath.Join(share, "images", filepath.Base(img))); err != nil {
			return err
		}
	}
	return writeNodeConfigs(filepath.Join(share, "node"), NodeName, c.cfg.PauseImage)
}

// Stop powers the node off, stops the control plane and deletes the namespace.
func (c *Cluster) Stop() {
	if c.boot != nil {
		os.WriteFile(filepath.Join(c.shareDir(), "cmd", "STOP"), nil, 0o644)
		select {
		case <-c.boot.Done():
		case <-time.After(30 * time.Second):
			c.boot.Kill()
		}
		c.boot.Wait()
	}
	for i := len(c.daemons) - 1; i >= 0; i-- {
		c.daemons[i].stop()
		<-c.daemons[i].done
	}
	if c.ns != nil {
		if err := c.ns.Delete(); err != nil {
			c.cfg.Logger.Error(err, "Deleting the network namespace")
		}
	}
}

func (c *Cluster) shareDir() string { return filepath.Join(c.cfg.WorkDir, "vm", "share") }

// pki is a file of the PKI (see writePKI), which the guest sees as /vmwork/pki.
func (c *Cluster) pki(name string) string { return filepath.Join(c.shareDir(), "pki", name) }

// Kubectl runs kubectl as cluster-admin inside the namespace.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return c.KubectlStdin(ctx, "", args...)
}

// KubectlStdin is Kubectl with stdin (for `apply -f -`).
func (c *Cluster) KubectlStdin(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.run(ctx, stdin, filepath.Join(c.cfg.EnvtestBin, "kubectl"), args...)
}

// Helm runs helm as cluster-admin inside the namespace.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, "", filepath.Join(c.cfg.Bin, "helm"), args...)
}

// Shell runs a script of kubectl and helm commands as an operator would
// type them (bash -euo pipefail, in dir).
func (c *Cluster) Shell(ctx context.Context, dir, script string) (string, error) {
	cmd := c.ns.Command(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, c.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("script %q: %v: %s", script, err, out)
	}
	return string(out), nil
}

// env is the commands' environment: kubectl and helm on PATH, the
// cluster-admin kubeconfig as KUBECONFIG, and helm's cache and config in
// the work dir, not in $HOME: its repositories too (`helm repo add`), which
// the caller's HELM_REPOSITORY_* would otherwise place elsewhere.
func (c *Cluster) env() []string {
	helm := filepath.Join(c.cfg.WorkDir, "helm")
	return append(os.Environ(), "PATH="+c.cfg.EnvtestBin+":"+c.cfg.Bin+":"+os.Getenv("PATH"), "KUBECONFIG="+c.pki("admin.kubeconfig"),
		"HELM_CACHE_HOME="+helm, "HELM_CONFIG_HOME="+helm, "HELM_DATA_HOME="+helm,
		"HELM_REPOSITORY_CONFIG="+filepath.Join(helm, "repositories.yaml"), "HELM_REPOSITORY_CACHE="+filepath.Join(helm, "repository"))
}

func (c *Cluster) run(ctx context.Context, stdin, bin string, args ...string) (string, error) {
	cmd := c.ns.Command(ctx, bin, args...)
	cmd.Env = c.env()
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// Logs names where the logs are, for reports: the daemons' of the host and
// the node, the node script's output and the VM's console.
func (c *Cluster) Logs() []string {
	return []string{c.logDir, filepath.Join(c.shareDir(), ".vm", "stdout"), filepath.Join(c.cfg.WorkDir, "vm", "console.log")}
}

// linkOrCopy hard-links src to dst (archives are large; the share is usually
// on the same filesystem), copying when it cannot.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil || errors.Is(err, os.ErrExist) {
		return nil
	}
	out, err := exec.Command("cp", "--reflink=auto", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s: %v: %s", src, err, out)
	}
	return nil
}
