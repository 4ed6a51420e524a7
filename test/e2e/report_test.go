package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The health check counts a restart of every container of the plugin's
// pod, sidecars included; none is a healthy pod.
func TestRestartSummaryCountsSidecars(t *testing.T) {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ssdcache-node-x1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: pluginContainer}, {Name: "node-driver-registrar"}}}}
	if got := restartSummary([]corev1.Pod{pod}, unknownRuns); got != "" {
		t.Errorf("no restart, yet: %q", got)
	}
	pod.Status.ContainerStatuses[1].RestartCount = 3
	if got := restartSummary([]corev1.Pod{pod}, unknownRuns); !strings.Contains(got, "container node-driver-registrar: 3 restarts") {
		t.Errorf("summary of a restarted sidecar: %q", got)
	}
}

// csi-provisioner losing its first connection right after it started, once,
// is the one restart let pass; later in its life, or twice, it is not.
func TestRestartSummaryLetsOneStartupReconnectPass(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	provisioner := func(restarts int32, ranFor time.Duration) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ssdcache-node-x1"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "csi-provisioner", RestartCount: restarts,
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
					StartedAt: started, FinishedAt: metav1.NewTime(started.Add(ranFor)), Message: "Lost connection to CSI driver, exiting"}}}}}}
	}
	if got := restartSummary([]corev1.Pod{provisioner(1, 4*time.Second)}, unknownRuns); got != "" {
		t.Errorf("a reconnect 4 s after start: %q, want it let pass", got)
	}
	for _, p := range []corev1.Pod{provisioner(1, 5*time.Minute), provisioner(2, 4*time.Second)} {
		if got := restartSummary([]corev1.Pod{p}, unknownRuns); !strings.Contains(got, "csi-provisioner") {
			t.Errorf("restart %+v not reported", p.Status.ContainerStatuses[0])
		}
	}
	// A starved node: the process logged first 32 s after the container's start.
	loggedAt := func(d time.Duration) func(*corev1.Pod, corev1.ContainerStatus) time.Time {
		return func(*corev1.Pod, corev1.ContainerStatus) time.Time { return started.Add(d) }
	}
	if got := restartSummary([]corev1.Pod{provisioner(1, 40*time.Second)}, loggedAt(32*time.Second)); got != "" {
		t.Errorf("a reconnect 8 s after the process's first line: %q, want it let pass", got)
	}
	if got := restartSummary([]corev1.Pod{provisioner(1, 5*time.Minute)}, loggedAt(32*time.Second)); got == "" {
		t.Error("a reconnect minutes after the process's first line was let pass")
	}
}

func unknownRuns(*corev1.Pod, corev1.ContainerStatus) time.Time { return time.Time{} }
