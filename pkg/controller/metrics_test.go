package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

func binding(name string, phase ssdv1.CacheBindingPhase, reason string) *ssdv1.CacheBinding {
	return &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
		Spec:       ssdv1.CacheBindingSpec{PVCName: name + "-pvc", Size: "1Gi"},
		Status: ssdv1.CacheBindingStatus{Phase: phase, NodeName: "n1", Conditions: []metav1.Condition{
			{Type: ssdv1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, LastTransitionTime: metav1.Now()}}},
	}
}

// One series per binding, from the leader only; a binding not admitted yet
// is labelled with the node its PV is pinned to (the alert on it names
// that node), or none while its PVC is unbound.
func TestBindingCollectorOnePerBindingOnTheLeaderOnly(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ssdv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// Not admitted (status.nodeName empty): waiting for node-b's capacity,
	// whose PV is pinned to node-b, and waiting for its PVC, which has no node.
	waiting := binding("tmp", ssdv1.PhasePending, ssdv1.ReasonInsufficientCache)
	waiting.Status.NodeName = ""
	unbound := binding("new", ssdv1.PhasePending, ssdv1.ReasonPVCNotBound)
	unbound.Status.NodeName = ""
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "tmp-pvc", Namespace: "team-a"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		binding("db", ssdv1.PhaseAttached, ssdv1.ReasonAttached),
		binding("logs", ssdv1.PhaseDegraded, ssdv1.ReasonCacheDeviceFailed),
		waiting, unbound, pvc, csiPV(ssdv1.DriverName, "node-b"),
	).Build()
	elected := make(chan struct{})
	col := NewBindingCollector(c, elected)
	if n := testutil.CollectAndCount(col); n != 0 {
		t.Fatalf("%d series before this replica leads", n)
	}
	close(elected)
	want := `
# HELP ssdcache_cachebinding_cache_attached 1 while a CacheBinding's cache is attached to its volume (phase Attached or Paused), 0 otherwise; phase and reason (the Ready condition's) say why not; node is its volume's.
# TYPE ssdcache_cachebinding_cache_attached gauge
ssdcache_cachebinding_cache_attached{cachebinding="db",namespace="team-a",node="n1",persistentvolumeclaim="db-pvc",phase="Attached",reason="Attached"} 1
ssdcache_cachebinding_cache_attached{cachebinding="logs",namespace="team-a",node="n1",persistentvolumeclaim="logs-pvc",phase="Degraded",reason="CacheDeviceFailed"} 0
ssdcache_cachebinding_cache_attached{cachebinding="new",namespace="team-a",node="",persistentvolumeclaim="new-pvc",phase="Pending",reason="PVCNotBound"} 0
ssdcache_cachebinding_cache_attached{cachebinding="tmp",namespace="team-a",node="node-b",persistentvolumeclaim="tmp-pvc",phase="Pending",reason="InsufficientCache"} 0
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
