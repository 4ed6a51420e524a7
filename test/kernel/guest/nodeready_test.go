package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vmguest "github.com/ssdcache/ssdcache/test/vm/guest"
)

// readyMetricsAddr is where the plugins of these tests serve /metrics.
const readyMetricsAddr = "127.0.0.1:9814"

// TestNodeReadyAfterDiskAppears (#15 item 2): a node whose origin disk is
// missing keeps running, answers Probe ready=false with
// ssdcache_node_pool_ready{pool="origin"} 0, and becomes ready, with the disk
// in its pool, once the disk appears (hot-plug: a loop device and its by-id
// link), without a restart. A selected disk that carries a filesystem is
// refused and left as it was, and the node becomes ready once the operator
// wipes it. Part of TestKernel's default run; alone:
// SSDCACHE_GUEST_RUN='^TestNodeReadyAfterDiskAppears$' hack/test-kernel.sh -run '^TestKernel$'.
func TestNodeReadyAfterDiskAppears(t *testing.T) {
	e := guestEnv(t)
	t.Run("missing", func(t *testing.T) {
		p := startUnready(t, e, "hotplug", "--origin-vg=hotplug-hdd",
			"--origin-selector=by-id=/dev/disk/by-id/ssdcache-test-hotplug-*", "--pool-retry-interval=1s")
		p.waitNotReady(`selector "by-id=/dev/disk/by-id/ssdcache-test-hotplug-*" matches no disk on this node`)
		expectPoolReadyMetric(t, "origin", "0")
		_, node := loopDisk(t, e, "hotplug-1", "")
		p.waitProbe(true)
		expectPoolReadyMetric(t, "origin", "1")
		if vg := strings.TrimSpace(sh(t, "pvs --noheadings -o vg_name %s", node)); vg != "hotplug-hdd" {
			t.Fatalf("the plugged disk is in VG %q, want hotplug-hdd", vg)
		}
		if exited, err := p.proc.Exited(); exited {
			t.Fatalf("ssdcache-node exited: %s", exitText(err))
		}
		p.stop()
		sh(t, "vgremove -y hotplug-hdd && pvremove -y %s", node)
	})
	t.Run("refused then wiped", func(t *testing.T) {
		byID, node := loopDisk(t, e, "hotplug-ext4", "mkfs.ext4 -q %s")
		before := sh(t, "dd if=%s bs=1M count=4 status=none | sha256sum", node)
		p := startUnready(t, e, "refused", "--origin-vg=refused-hdd", "--origin-devices="+byID, "--pool-retry-interval=1s")
		p.waitNotReady("carries a ext4 signature")
		if after := sh(t, "dd if=%s bs=1M count=4 status=none | sha256sum", node); after != before {
			t.Fatalf("refused device %s was written to", byID)
		}
		sh(t, "wipefs -a -q %s", node)
		p.waitProbe(true)
		if vg := strings.TrimSpace(sh(t, "pvs --noheadings -o vg_name %s", node)); vg != "refused-hdd" {
			t.Fatalf("the wiped disk is in VG %q, want refused-hdd", vg)
		}
		p.stop()
		sh(t, "vgremove -y refused-hdd && pvremove -y %s", node)
	})
}

// startUnready runs ssdcache-node without the API and without waiting for
// it to be ready, which launch does.
func startUnready(t *testing.T, e env, name string, args ...string) *plugin {
	t.Helper()
	p := &plugin{t: t, env: e, socket: filepath.Join(e.work, name+".sock")}
	_ = os.Remove(p.socket)
	// The later --metrics-address wins over NodeArgs' default.
	p.args = append(append(vmguest.NodeArgs(nodeName, p.socket), "--metrics-address="+readyMetricsAddr, "--state-dir="), args...)
	p.spawn()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("ssdcache-node log:\n%s", p.log)
		}
	})
	return p
}

// waitNotReady waits until the plugin serves CSI, answers Probe
// ready=false and has logged reason; a plugin that exits fails the test.
func (p *plugin) waitNotReady(reason string) {
	p.t.Helper()
	p.waitProbe(false)
	err := poll("ssdcache-node to log "+reason, 100*time.Millisecond, func() (bool, string, error) {
		// klog quotes a structured value, escaping the quotes inside it.
		log := strings.ReplaceAll(p.log.String(), `\"`, `"`)
		return strings.Contains(log, reason), lastLines(p.log.String(), 5), nil
	})
	if err != nil {
		p.t.Fatalf("%v\n%s", err, p.diagnose())
	}
}

// waitProbe waits until Probe answers ready (or not ready).
func (p *plugin) waitProbe(ready bool) {
	p.t.Helper()
	err := poll(fmt.Sprintf("ssdcache-node to answer Probe ready=%v", ready), 200*time.Millisecond, func() (bool, string, error) {
		if exited, err := p.proc.Exited(); exited {
			return false, "", fmt.Errorf("ssdcache-node exited: %s", exitText(err))
		}
		got, err := probeReady(p.socket)
		if err != nil {
			return false, "Probe: " + err.Error(), nil
		}
		return got == ready, fmt.Sprintf("ready=%v", got), nil
	})
	if err != nil {
		p.t.Fatalf("%v\n%s", err, p.diagnose())
	}
}

// probeReady calls Probe once on a connection of its own.
func probeReady(socket string) (bool, error) {
	if _, err := os.Stat(socket); err != nil {
		return false, err
	}
	c, cancel := context.WithTimeout(context.Background(), vmguest.ProbeAttempt)
	defer cancel()
	clients, err := vmguest.Connect(c, socket)
	if errors.Is(err, vmguest.ErrNotReady) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, clients.Conn.Close()
}

// expectPoolReadyMetric checks ssdcache_node_pool_ready{pool=...} on /metrics.
func expectPoolReadyMetric(t *testing.T, pool, want string) {
	t.Helper()
	series := fmt.Sprintf(`ssdcache_node_pool_ready{node=%q,pool=%q} %s`, nodeName, pool, want)
	var body string
	err := poll(series+" on /metrics", 200*time.Millisecond, func() (bool, string, error) {
		resp, err := http.Get("http://" + readyMetricsAddr + "/metrics")
		if err != nil {
			return false, err.Error(), nil
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && strings.Contains(body, series+"\n"), "", nil
	})
	if err != nil {
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "ssdcache_node_pool_ready") {
				lines = append(lines, l)
			}
		}
		t.Fatalf("%v; /metrics has %q", err, lines)
	}
}
