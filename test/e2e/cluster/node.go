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
	cfg.Logger = &c.cfg.Logger
	node, err := vm.New(cfg)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("E2E_BIN=%s\nNODE_NAME=%s\nNODE_IP=%s\nNODE_MAC=%s\nHOST_IP=%s\n",
		c.cfg.Bin, NodeName, NodeIP, NodeMAC, HostIP)
	// Not bound to ctx: the node lives until Stop.
	c.boot, err = node.Start(context.WithoutCancel(ctx), header+nodeScript)
	return err
}

// waitNodeReady waits, until ctx ends, for the node to register and turn
// Ready. Start's error adds the end of kubelet's log.
func (c *Cluster) waitNodeReady(ctx context.Context) error {
	const ready = `{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`
	return c.Poll(ctx, "node "+NodeName+" Ready", time.Second, func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "node", NodeName, "-o", "jsonpath="+ready)
		if err != nil {
			return false, err.Error(), nil
		}
		status, message, _ := strings.Cut(strings.TrimSpace(out), " ")
		return status == "True", fmt.Sprintf("Ready=%q: %s", status, message), nil
	})
}

// waitImages waits, until ctx ends, for the node to have imported every
// image archive (it imports all but the pause image while kubelet
// registers). Start's error adds the end of the node script's output, which
// notes each failed import.
func (c *Cluster) waitImages(ctx context.Context) error {
	marker := filepath.Join(c.shareDir(), "images-imported")
	return c.Poll(ctx, "the node to import its images", time.Second, func() (bool, string, error) {
		_, err := os.Stat(marker)
		return err == nil, "no " + marker + " yet", nil
	})
}

// waitServiceIP waits, until ctx ends, for the API server to answer on its
// Service IP from the node: kube-proxy programs that rule some time after it
// starts, and csi-provisioner exits if its first API call times out there.
func (c *Cluster) waitServiceIP(ctx context.Context) error {
	probe := fmt.Sprintf("timeout 5 bash -c '</dev/tcp/%s/443'", ServiceAPIIP)
	return c.Poll(ctx, "the API server on its Service IP "+ServiceAPIIP, time.Second, func() (bool, string, error) {
		out, err := c.NodeExec(ctx, probe)
		if err != nil {
			return false, strings.TrimSpace(out + " " + err.Error()), nil
		}
		return true, "", nil
	})
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
			return "", fmt.Errorf("node command %s: %w; %s", base, ctx.Err(), commandState(base))
		case <-c.boot.Done():
			return "", fmt.Errorf("node command %s: the VM has stopped; %s", base, commandState(base))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// commandState says how far the node got with command base (see node.sh),
// for a NodeExec that gave up.
func commandState(base string) string {
	if _, err := os.Stat(base + ".sh"); err == nil {
		return "the node had not picked it up (busy with an earlier command, or its loop is gone)"
	}
	out, _ := lastLines(base+".out", 5)
	return "the node was running it; its last output: " + out
}
