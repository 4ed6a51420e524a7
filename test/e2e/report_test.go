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
	if got := restartSummary([]corev1.Pod{pod}); got != "" {
		t.Errorf("no restart, yet: %q", got)
	}
	pod.Status.ContainerStatuses[1].RestartCount = 3
	if got := restartSummary([]corev1.Pod{pod}); !strings.Contains(got, "container node-driver-registrar: 3 restarts") {
		t.Errorf("summary of a restarted sidecar: %q", got)
	}
}

// csi-provisioner's exit on a lost first connection is a restart like any
// other: the e2e once let one pass.
func TestRestartSummaryReportsAProvisionerThatLostItsConnection(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ssdcache-node-x1"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "csi-provisioner", RestartCount: 1,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
				StartedAt: started, FinishedAt: metav1.NewTime(started.Add(4 * time.Second)), Message: "Lost connection to CSI driver, exiting"}}}}}}
	if got := restartSummary([]corev1.Pod{pod}); !strings.Contains(got, "container csi-provisioner: 1 restarts") {
		t.Errorf("a reconnect 4 s after start: %q, want it reported", got)
	}
}
