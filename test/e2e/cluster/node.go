package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

//go:embed node.sh
var nodeScript string

// bootNode starts the guest running node.sh.
func (c *Cluster) bootNode(ctx context.Context) error {
	cfg := c.cfg.VM
	cfg.WorkDir = filepath.Join(c.cfg.WorkDir, "vm")
	cfg.Network = &vm.Network{NetNS: c.ns.Name, Tap: tapName, MAC: NodeMAC}
	if cfg.Logger == nil {
		cfg.Logger = &c.cfg.Logger
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 45 * time.Minute // the node lives as long as the whole test
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 4096 // containerd's images and the pods' root filesystems are in RAM
	}
	var err error
	if c.node, err = vm.New(cfg); err != nil {
		return err
	}
	header := fmt.Sprintf("E2E_BIN=%s\nNODE_NAME=%s\nNODE_IP=%s\nNODE_MAC=%s\nHOST_IP=%s\n",
		c.cfg.Bin, c.cfg.NodeName, NodeIP, NodeMAC, HostIP)
	// Not bound to ctx: the node lives until Stop.
	c.boot, err = c.node.Start(context.WithoutCancel(ctx), header+nodeScript)
	return err
}

// waitNodeReady waits for the node to register and turn Ready.
func (c *Cluster) waitNodeReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		out, err := c.Kubectl(ctx, "get", "node", c.cfg.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && strings.TrimSpace(out) == "True" {
			return nil
		}
		select {
		case <-c.boot.Done():
			return fmt.Errorf("the node's VM stopped before the node was Ready (see %s)", filepath.Join(c.logDir, "kubelet.log"))
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready within 10 minutes (last: %q, %v; see %s)", c.cfg.NodeName, out, err, filepath.Join(c.logDir, "kubelet.log"))
		case <-time.After(time.Second):
		}
	}
}

// waitImages waits until the node has imported every image archive (the
// node imports all but the pause image while kubelet registers).
func (c *Cluster) waitImages(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	marker := filepath.Join(c.shareDir(), "images-imported")
	for {
		if _, err := os.Stat(marker); err == nil {
			return nil
		}
		select {
		case <-c.boot.Done():
			return errors.New("the node's VM stopped while importing images")
		case <-ctx.Done():
			return fmt.Errorf("the node did not import its images within 10 minutes (see %s)", filepath.Join(c.shareDir(), ".vm", "stdout"))
		case <-time.After(time.Second):
		}
	}
}

// NodeExec runs a bash script as root on the node (in the guest, outside any
// container) and returns its combined output. A non-zero exit is an error.
func (c *Cluster) NodeExec(ctx context.Context, script string) (string, error) {
	base := filepath.Join(c.shareDir(), "cmd", "c"+strconv.FormatInt(c.cmdSeq.Add(1), 10))
	if err := os.WriteFile(base+".tmp", []byte(script), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(base+".tmp", base+".sh"); err != nil {
		return "", err
	}
	for {
		rc, err := os.ReadFile(base + ".rc")
		if err == nil {
			out, _ := os.ReadFile(base + ".out")
			if code := strings.TrimSpace(string(rc)); code != "0" {
				return string(out), fmt.Errorf("node command exited %s: %s", code, strings.TrimSpace(string(out)))
			}
			return string(out), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("node command %s: %w", base, ctx.Err())
		case <-c.boot.Done():
			return "", errors.New("node command: the VM has stopped")
		case <-time.After(200 * time.Millisecond):
		}
	}
}
