package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// connectStartsEnv sets how many node plugin pods TestSidecarFirstConnection
// starts; unset, the test is skipped (make stress-connect sets it).
const connectStartsEnv = "SSDCACHE_E2E_CONNECT_STARTS"

// daemonCgroups are the two places the node's containerd, kubelet and
// kube-proxy (and containerd's shims) are moved between, start by start:
// the root cgroup, where each of their threads competes with the whole
// kubepods tree on its own, and system.slice, one group as systemd puts
// them on a real node (node.sh's default).
var daemonCgroups = []string{"/sys/fs/cgroup/system.slice", "/sys/fs/cgroup"}

// TestSidecarFirstConnection measures what decides csi-provisioner's first
// connection to a new plugin pod: csi-lib-utils gives the dial and the
// HTTP/2 handshake one second, and a redial after a dial that succeeded is
// a lost connection on which the sidecar exits. With a reader on a volume
// keeping the node busy, it starts the plugin pod again and again,
// alternating the node daemons' cgroup, and reports per start how long the
// provisioner's process took to log its first line, how long its first
// subchannel took from CONNECTING to READY (grpc's own log, timestamped by
// the runtime) and whether it restarted. Timings are reported, not judged;
// it fails only on a restart.
func TestSidecarFirstConnection(t *testing.T) {
	starts, _ := strconv.Atoi(os.Getenv(connectStartsEnv))
	if testing.Short() || os.Getenv(enableEnv) != "1" || starts <= 0 {
		t.Skipf("boots a one-node cluster and restarts its plugin: set %s=1 and %s=N", enableEnv, connectStartsEnv)
	}
	ctx, cancel := context.WithDeadline(context.Background(), stepsDeadline(t))
	defer cancel()
	s := newSuite(t)
	defer func() {
		if s.c != nil {
			s.c.Stop()
		}
	}()
	for _, step := range []func(context.Context, *testing.T){s.buildImages, s.startCluster, s.helmInstall, s.cachedStorageClass} {
		step(ctx, t)
		if t.Failed() {
			return
		}
	}
	s.apply(ctx, t, storageClassUncached)
	s.apply(ctx, t, pvcAndPod(reader, "e2e-uncached", volumeSize, s.images.project, writeDataSet+verifyLoop))
	s.waitReady(ctx, t, readerPod)
	// grpc's own log says when each subchannel connects; the change rolls the pod once.
	s.kubectl(ctx, t, "-n", namespace, "set", "env", "daemonset/"+release+"-node", "-c", "csi-provisioner",
		"GRPC_GO_LOG_SEVERITY_LEVEL=info", "GRPC_GO_LOG_VERBOSITY_LEVEL=2")
	s.waitRollout(ctx, t, object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector})

	var rows []connectStart
	for i := 0; i < starts; i++ {
		cg := daemonCgroups[i%len(daemonCgroups)]
		s.node(ctx, t, moveDaemons(cg))
		s.kubectl(ctx, t, "-n", namespace, "delete", "pod", "-l", nodeSelector, "--wait", timeoutFlag(ctx))
		s.startNodePlugin(ctx, t)
		row := s.measureConnect(ctx, t)
		row.cgroup = cg
		row.pressure = strings.TrimSpace(s.node(ctx, t, "head -1 /proc/pressure/cpu"))
		t.Logf("start %d: %s", i+1, row)
		rows = append(rows, row)
	}
	t.Logf("summary:\n%s", connectSummary(rows))
	for _, r := range rows {
		if r.restarts > 0 {
			t.Errorf("csi-provisioner restarted %d times after a start with the daemons in %s", r.restarts, r.cgroup)
		}
	}
}

// moveDaemons moves the node's daemons, with all their threads, into cg.
func moveDaemons(cg string) string {
	return fmt.Sprintf(`set -e
mkdir -p %[1]s
for p in $(pgrep -x containerd) $(pgrep -x kubelet) $(pgrep -x kube-proxy) $(pgrep -f containerd-shim); do
  echo $p > %[1]s/cgroup.procs
done`, cg)
}

// connectStart is what one plugin pod start showed of csi-provisioner.
type connectStart struct {
	cgroup     string
	toFirstLog time.Duration // container start (kubelet, seconds) to its process's first line
	connect    time.Duration // first subchannel CONNECTING to READY; 0 if not seen
	attempts   int           // subchannel CONNECTING lines
	failure    string        // the first failed attempt's error, as grpc logged it
	restarts   int32
	pressure   string
}

func (c connectStart) String() string {
	s := fmt.Sprintf("daemons in %s: first log %.1fs after start, connect %dms over %d attempts, %d restarts (%s)",
		c.cgroup, c.toFirstLog.Seconds(), c.connect.Milliseconds(), c.attempts, c.restarts, c.pressure)
	if c.failure != "" {
		s += "; first failed attempt: " + c.failure
	}
	return s
}

// measureConnect waits until the new pod's csi-provisioner detected the
// driver (connected and probed) or restarted, then reads its first run's log.
func (s *suite) measureConnect(ctx context.Context, t *testing.T) connectStart {
	t.Helper()
	var pod corev1.Pod
	s.eventually(ctx, t, "csi-provisioner connected", object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector},
		func() (bool, string, error) {
			pods, err := s.getPods(ctx, namespace, "-l", nodeSelector)
			if err != nil || len(pods) != 1 {
				return false, fmt.Sprintf("%d pods%s", len(pods), errOrEmpty(err)), nil
			}
			pod = pods[0]
			if provisionerStatus(&pod).RestartCount > 0 {
				return true, "restarted", nil
			}
			out, err := s.c.Kubectl(ctx, "-n", namespace, "logs", pod.Name, "-c", "csi-provisioner")
			return err == nil && strings.Contains(out, "Detected CSI driver"), "no 'Detected CSI driver' yet", nil
		})
	st := provisionerStatus(&pod)
	args := []string{"-n", namespace, "logs", pod.Name, "-c", "csi-provisioner", "--timestamps"}
	started := st.State.Running
	if st.RestartCount > 0 {
		args = append(args, "--previous")
		started = nil
		if last := st.LastTerminationState.Terminated; last != nil {
			started = &corev1.ContainerStateRunning{StartedAt: last.StartedAt}
		}
	}
	logs := s.kubectl(ctx, t, args...)
	row := parseConnectLog(logs)
	row.restarts = st.RestartCount
	if started != nil && !row.firstLine.IsZero() {
		row.toFirstLog = row.firstLine.Sub(started.StartedAt.Time)
	}
	return row.connectStart
}

func provisionerStatus(p *corev1.Pod) corev1.ContainerStatus {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "csi-provisioner" {
			return c
		}
	}
	return corev1.ContainerStatus{}
}

type parsedConnect struct {
	connectStart
	firstLine time.Time
}

// parseConnectLog reads `kubectl logs --timestamps` of csi-provisioner with
// grpc's info log: the first line's time, and the first subchannel's
// CONNECTING to READY.
func parseConnectLog(logs string) parsedConnect {
	var p parsedConnect
	var connecting time.Time
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		stamp, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue
		}
		if p.firstLine.IsZero() {
			p.firstLine = at
		}
		switch {
		case strings.Contains(line, "Subchannel Connectivity change to CONNECTING"):
			p.attempts++
			if connecting.IsZero() {
				connecting = at
			}
		case strings.Contains(line, "Subchannel Connectivity change to READY") && p.connect == 0 && !connecting.IsZero():
			p.connect = at.Sub(connecting)
		case p.failure == "" && strings.Contains(line, "Subchannel Connectivity change to TRANSIENT_FAILURE"):
			_, p.failure, _ = strings.Cut(line, "last error: ")
		}
	}
	return p
}

// connectSummary gives, per cgroup, the starts, restarts and the median and
// largest connect and first-log times.
func connectSummary(rows []connectStart) string {
	by := map[string][]connectStart{}
	for _, r := range rows {
		by[r.cgroup] = append(by[r.cgroup], r)
	}
	var b strings.Builder
	for _, cg := range daemonCgroups {
		rs := by[cg]
		if len(rs) == 0 {
			continue
		}
		var connects, firsts []time.Duration
		restarts := 0
		for _, r := range rs {
			connects = append(connects, r.connect)
			firsts = append(firsts, r.toFirstLog)
			if r.restarts > 0 {
				restarts++
			}
		}
		fmt.Fprintf(&b, "  daemons in %s: %d starts, %d with a restart; connect median %s, max %s; first log median %s, max %s\n",
			cg, len(rs), restarts, median(connects), maxOf(connects), median(firsts), maxOf(firsts))
	}
	return b.String()
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = max(m, d)
	}
	return m
}
