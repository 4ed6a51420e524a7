package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The node plugin must run the whole scenario without any container of its
// pod restarting: ssdcache-node and its sidecars alike. A restart is a crash
// or a failed liveness probe (a plugin hung in an LVM command, say); the
// volumes stay staged across it, so a step's own checks may pass, and a
// later step then times out far from the cause. Only the "node plugin
// restart" step replaces the pod, on purpose: the new pod's containers start
// from 0 restarts and must stay there.

const (
	nodeSelector    = "app.kubernetes.io/component=node" // the node DaemonSet's pods
	pluginContainer = "ssdcache-node"
	// pluginCheckInterval is how often a wait checks the plugin's restarts:
	// at every poll it would double the kubectl calls on a busy machine.
	pluginCheckInterval = 10 * time.Second
	// pluginLogTail and podLogTail are how many log lines a report quotes
	// of ssdcache-node and of the containers of other pods.
	pluginLogTail = 40
	podLogTail    = 20
)

// expectPluginHealthy fails the test unless the node plugin's pod is there
// and none of its containers has restarted; the failure has each restarted
// container's last termination state, its previous log and the pod's events.
// TestEndToEnd runs it at the end of every step while the chart is installed.
func (s *suite) expectPluginHealthy(ctx context.Context, t *testing.T) {
	t.Helper()
	pods, err := s.getPods(ctx, namespace, "-l", nodeSelector)
	if err != nil {
		t.Fatalf("node plugin pods: %v", err)
	}
	if len(pods) == 0 {
		t.Fatalf("no node plugin pod\n%s", s.events(ctx, namespace, ""))
	}
	if restarts := restartSummary(pods); restarts != "" {
		t.Fatalf("the node plugin restarted:\n%s\n%s", restarts, s.pluginReport(ctx))
	}
}

// failOnPluginRestart ends a wait as soon as a container of the node plugin
// has restarted: the wait would only time out later, far from the cause.
// Before the chart is installed and after it is uninstalled there is no
// plugin to check. An error getting the pods is left to the wait's report.
func (s *suite) failOnPluginRestart(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	if !s.pluginInstalled {
		return
	}
	pods, err := s.getPods(ctx, namespace, "-l", nodeSelector)
	if err != nil {
		return
	}
	if restarts := restartSummary(pods); restarts != "" {
		t.Fatalf("%s: stopped waiting, the node plugin restarted:\n%s\n%s", what, restarts, s.pluginReport(ctx))
	}
}

// restartSummary lists the containers of pods that have restarted, one line
// each with its count and last termination; "" when none has. Every restart
// counts, sidecars' included: csi-provisioner's exit on losing its first
// connection to a new plugin pod, once let pass, came from a starved node
// (see test/e2e/cluster/node.sh and TestSidecarFirstConnection).
func restartSummary(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		for _, c := range containerStatuses(&p) {
			if c.RestartCount > 0 {
				fmt.Fprintf(&b, "  pod %s, container %s: %d restarts, last %s\n", p.Name, c.Name, c.RestartCount, stateText(c.LastTerminationState))
			}
		}
	}
	return b.String()
}

// pluginReport is the node plugin's side of a failure: for each of its pods,
// the state of every container, the last lines ssdcache-node logged, the
// log of each restarted container before its restart, and the pod's events.
// It has its own time, as the steps' context may have ended.
func (s *suite) pluginReport(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	pods, err := s.getPods(ctx, namespace, "-l", nodeSelector)
	if err != nil {
		return "--- node plugin pods: " + err.Error() + "\n"
	}
	if len(pods) == 0 {
		return "--- node plugin: no pod\n"
	}
	var b strings.Builder
	for i := range pods {
		b.WriteString(s.podReport(ctx, &pods[i], pluginLogTail, pluginContainer))
	}
	return b.String()
}

// podReport is one pod's state (describePod), the last logLines lines of
// the named containers, the previous log of each restarted container, and
// the pod's events.
func (s *suite) podReport(ctx context.Context, p *corev1.Pod, logLines int, containers ...string) string {
	var b strings.Builder
	b.WriteString(describePod(p))
	logs := func(container string, previous bool) {
		args := []string{"-n", p.Namespace, "logs", p.Name, "-c", container, fmt.Sprintf("--tail=%d", logLines)}
		which := "last"
		if previous {
			args, which = append(args, "--previous"), "before its last restart, last"
		}
		out, err := s.c.Kubectl(ctx, args...)
		fmt.Fprintf(&b, "--- %s/%s log, %s %d lines:\n%s%s\n", p.Name, container, which, logLines, out, errOrEmpty(err))
	}
	for _, c := range containers {
		logs(c, false)
	}
	for _, c := range containerStatuses(p) {
		if c.RestartCount > 0 {
			logs(c.Name, true)
		}
	}
	b.WriteString(s.events(ctx, p.Namespace, p.Name))
	return b.String()
}

// getPods lists the pods of namespace ns that args select (-l, --field-selector).
func (s *suite) getPods(ctx context.Context, ns string, args ...string) ([]corev1.Pod, error) {
	out, err := s.c.Kubectl(ctx, append([]string{"-n", ns, "get", "pods", "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("decoding kubectl get pods %v: %w", args, err)
	}
	return list.Items, nil
}

// describePod is a pod's phase and, for each container, whether it is
// ready, its restart count, its state and its last termination.
func describePod(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- pod %s/%s: %s", p.Namespace, p.Name, p.Status.Phase)
	if p.Status.Reason != "" {
		fmt.Fprintf(&b, " (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	if p.DeletionTimestamp != nil {
		fmt.Fprintf(&b, ", being deleted since %s", p.DeletionTimestamp.Format(time.TimeOnly))
	}
	b.WriteString("\n")
	for _, c := range containerStatuses(p) {
		fmt.Fprintf(&b, "  container %s: ready=%v restarts=%d, %s; last %s\n", c.Name, c.Ready, c.RestartCount, stateText(c.State), stateText(c.LastTerminationState))
	}
	return b.String()
}

func containerStatuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

func stateText(st corev1.ContainerState) string {
	switch {
	case st.Running != nil:
		return "running since " + st.Running.StartedAt.Format(time.TimeOnly)
	case st.Waiting != nil:
		return fmt.Sprintf("waiting (%s) %s", st.Waiting.Reason, st.Waiting.Message)
	case st.Terminated != nil:
		tm := st.Terminated
		return fmt.Sprintf("terminated at %s (%s, exit code %d, signal %d) %s",
			tm.FinishedAt.Format(time.TimeOnly), tm.Reason, tm.ExitCode, tm.Signal, tm.Message)
	}
	return "none"
}
