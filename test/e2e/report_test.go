package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pluginPod(registrarRestarts int32) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ssdcache-node-x1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: pluginContainer},
			{Name: "node-driver-registrar", RestartCount: registrarRestarts,
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: "Error", ExitCode: 2, Message: "no kubelet registration dir"}}},
		}},
	}
}

// The health check looks at every container of the plugin's pod, sidecars
// included, and names the restarted one with how it last ended.
func TestRestartSummaryNamesEachRestartedContainer(t *testing.T) {
	if got := restartSummary([]corev1.Pod{pluginPod(0)}, unknownRuns); got != "" {
		t.Errorf("no restart, yet: %q", got)
	}
	got := restartSummary([]corev1.Pod{pluginPod(3)}, unknownRuns)
	for _, want := range []string{"ssdcache-node-x1", "node-driver-registrar: 3 restarts", "Error, exit code 2", "no kubelet registration dir"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, pluginContainer+":") {
		t.Errorf("summary names a container that did not restart:\n%s", got)
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
