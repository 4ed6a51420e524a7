package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Addresses of the one-node cluster. They exist only inside the test's
// network namespace and the guest: nothing here is routed anywhere else.
const (
	HostIP       = "10.250.0.1" // tap device in the namespace; the apiserver
	NodeIP       = "10.250.0.2" // the guest's NIC; kubelet's node IP
	NodeMAC      = "52:54:00:00:00:02"
	NodeName     = "e2e-node"
	ClusterCIDR  = "10.244.0.0/16"
	PodCIDR      = "10.244.0.0/24"
	ServiceCIDR  = "10.96.0.0/16"
	ServiceAPIIP = "10.96.0.1"
	tapName      = "tap0"
	netnsPrefix  = "ssdcache-e2e-"
)

// Netns is the network namespace the control plane and qemu run in. The
// namespace has loopback and a tap device to the guest, and no other link.
type Netns struct{ Name string }

// createNetns makes namespace ssdcache-e2e-<pid> with the tap device, after
// removing namespaces that earlier runs left behind (their pid is gone).
func (c *Cluster) createNetns(ctx context.Context) error {
	removeStaleNetns(ctx)
	n := &Netns{Name: netnsPrefix + strconv.Itoa(os.Getpid())}
	steps := [][]string{
		{"netns", "add", n.Name},
		{"-n", n.Name, "link", "set", "lo", "up"},
		{"-n", n.Name, "tuntap", "add", "dev", tapName, "mode", "tap"},
		{"-n", n.Name, "addr", "add", HostIP + "/24", "dev", tapName},
		{"-n", n.Name, "link", "set", tapName, "up"},
		// Pod IPs live behind the guest; the apiserver reaches them (logs,
		// service proxy) through it.
		{"-n", n.Name, "route", "add", ClusterCIDR, "via", NodeIP, "dev", tapName, "onlink"},
	}
	for i, s := range steps {
		if out, err := exec.CommandContext(ctx, "ip", s...).CombinedOutput(); err != nil {
			if i > 0 {
				n.Delete()
			}
			return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	c.ns = n
	return nil
}

// Command runs name inside the namespace. `ip netns exec` execs in place, so
// the process is name itself; it is killed if the test process dies.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Delete removes the namespace and with it the tap device and routes.
func (n *Netns) Delete() error {
	if out, err := exec.Command("ip", "netns", "delete", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", n.Name, err, out)
	}
	return nil
}

func removeStaleNetns(ctx context.Context) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, err := strconv.Atoi(strings.TrimPrefix(name, netnsPrefix))
		if !strings.HasPrefix(name, netnsPrefix) || err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		exec.CommandContext(ctx, "ip", "netns", "delete", name).Run()
	}
}
