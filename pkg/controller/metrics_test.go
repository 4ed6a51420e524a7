package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

func TestBindingCollectorOnePerBindingOnTheLeaderOnly(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ssdv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		binding("db", ssdv1.PhaseAttached, ssdv1.ReasonAttached),
		binding("logs", ssdv1.PhaseDegraded, ssdv1.ReasonCacheDeviceFailed),
	).Build()
	elected := make(chan struct{})
	col := NewBindingCollector(c, elected)
	if n := testutil.CollectAndCount(col); n != 0 {
		t.Fatalf("%d series before this replica leads", n)
	}
	close(elected)
	want := `
# HELP ssdcache_cachebinding_cache_attached 1 while a CacheBinding's cache is attached to its volume (phase Attached or Paused), 0 otherwise; phase and reason (the Ready condition's) say why not.
# TYPE ssdcache_cachebinding_cache_attached gauge
ssdcache_cachebinding_cache_attached{cachebinding="db",namespace="team-a",node="n1",persistentvolumeclaim="db-pvc",phase="Attached",reason="Attached"} 1
ssdcache_cachebinding_cache_attached{cachebinding="logs",namespace="team-a",node="n1",persistentvolumeclaim="logs-pvc",phase="Degraded",reason="CacheDeviceFailed"} 0
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
