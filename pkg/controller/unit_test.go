package controller

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

func TestNodeLoadFitsOldestFirst(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	older := []claim{
		{namespace: "a", name: "big", created: t0, sizeBytes: 8},
		{namespace: "a", name: "small", created: t0.Add(time.Second), sizeBytes: 1},
	}
	cases := []struct {
		name      string
		load      nodeLoad
		candidate claim
		want      bool
		wantFree  int64
	}{
		{"empty node", nodeLoad{capacity: 10}, claim{sizeBytes: 10}, true, 10},
		{"exactly full", nodeLoad{capacity: 10, admittedBytes: 4}, claim{sizeBytes: 6}, true, 6},
		{"admitted take room", nodeLoad{capacity: 10, admittedBytes: 5}, claim{sizeBytes: 6}, false, 5},
		{"older pending go first", nodeLoad{capacity: 10, olderPending: older}, claim{sizeBytes: 2}, false, 1},
		// The older 8 does not fit beside 5 admitted, so it takes nothing; the older 1 does.
		{"older that do not fit are skipped", nodeLoad{capacity: 10, admittedBytes: 5, olderPending: older}, claim{sizeBytes: 4}, true, 4},
		{"overcommitted node", nodeLoad{capacity: 4, admittedBytes: 5}, claim{sizeBytes: 1}, false, 0},
	}
	for _, c := range cases {
		got, free := c.load.fits(c.candidate)
		if got != c.want || free != c.wantFree {
			t.Errorf("%s: fits = %v, free %d; want %v, free %d", c.name, got, free, c.want, c.wantFree)
		}
	}
}

func TestCompareAgeIsTotal(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	a := claim{namespace: "ns", name: "a", created: t0}
	b := claim{namespace: "ns", name: "b", created: t0}
	c := claim{namespace: "ns", name: "a", created: t0.Add(time.Second)}
	if compareAge(a, b) >= 0 || compareAge(b, a) <= 0 || compareAge(a, a) != 0 {
		t.Error("bindings created in the same second must be ordered by name")
	}
	if compareAge(b, c) >= 0 {
		t.Error("an older binding must come first whatever its name")
	}
}

func TestResizeFits(t *testing.T) {
	l := nodeLoad{capacity: 10, admittedBytes: 6}
	if !l.resizeFits(4, 3) || !l.resizeFits(4, 4) || l.resizeFits(4, 5) {
		t.Error("shrinking or keeping must fit; growing beyond capacity must not")
	}
	over := nodeLoad{capacity: 5, admittedBytes: 6}
	if !over.resizeFits(4, 2) {
		t.Error("shrinking must fit even on an overcommitted node")
	}
}

func csiPV(driver string, nodes ...string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}}
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")}
	if driver != "" {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-1"}
	}
	if len(nodes) > 0 {
		var terms []corev1.NodeSelectorTerm
		for _, n := range nodes {
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{n}},
			}})
		}
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	}
	return pv
}

func TestTargetFromPV(t *testing.T) {
	got, err := targetFromPV(csiPV(ssdv1.DriverName, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	if got != (target{nodeName: "node-a", volumeHandle: "vol-1", volumeBytes: 100 << 30}) {
		t.Errorf("targetFromPV = %+v", got)
	}
	refused := map[string]*corev1.PersistentVolume{
		"not provisioned by the ssdcache.io": csiPV("ebs.csi.aws.com", "node-a"),
		"none: not a CSI volume":             csiPV("", "node-a"),
		"no required node affinity":          csiPV(ssdv1.DriverName),
		"pinned to one node":                 csiPV(ssdv1.DriverName, "node-a", "node-b"),
	}
	for want, pv := range refused {
		_, err := targetFromPV(pv)
		p, _ := asPending(err)
		if p == nil || p.reason != ssdv1.ReasonVolumeNotCacheable || !strings.Contains(p.message, want) {
			t.Errorf("targetFromPV: got %v, want VolumeNotCacheable mentioning %q", err, want)
		}
	}
}

func TestBindingSpecFromClass(t *testing.T) {
	class := func(provisioner string, params map[string]string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "sc"}, Provisioner: provisioner, Parameters: params}
	}
	spec, err := bindingSpecFromClass("data", class(ssdv1.DriverName, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamCacheSize: "5Gi"}))
	if err != nil || spec == nil || !reflect.DeepEqual(*spec, ssdv1.CacheBindingSpec{PVCName: "data", Size: "5Gi", Mode: ssdv1.ModeReadCache, Warmup: ssdv1.WarmupHotSet}) {
		t.Fatalf("readcache class: spec %+v, err %v", spec, err)
	}
	spec, err = bindingSpecFromClass("data", class(ssdv1.DriverName, map[string]string{ssdv1.ParamCacheMode: "ReadCache"}))
	if err != nil || spec.Size != ssdv1.DefaultCacheSize {
		t.Errorf("class without size: spec %+v, err %v; want size %s", spec, err, ssdv1.DefaultCacheSize)
	}
	spec, err = bindingSpecFromClass("data", class(ssdv1.DriverName, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamDeviceClass: "optane", ssdv1.ParamWarmup: "None"}))
	if err != nil || spec.DeviceClass != "optane" || spec.Warmup != ssdv1.WarmupNone {
		t.Errorf("class with a device class: spec %+v, err %v; want deviceClass optane, warmup None", spec, err)
	}
	for _, sc := range []*storagev1.StorageClass{
		class(ssdv1.DriverName, nil),
		class(ssdv1.DriverName, map[string]string{ssdv1.ParamCacheMode: "None"}),
		class("other.csi.io", map[string]string{ssdv1.ParamCacheMode: "ReadCache"}),
	} {
		if spec, err := bindingSpecFromClass("data", sc); spec != nil || err != nil {
			t.Errorf("class %v must not ask for a cache: spec %+v, err %v", sc.Parameters, spec, err)
		}
	}
	bad := map[string]map[string]string{
		`StorageClass sc: parameter ssdcache.io/cache-mode: "writeback" is not allowed`: {ssdv1.ParamCacheMode: "writeback"},
		`ssdcache.io/cache-size: cache size "10"`:                                       {ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamCacheSize: "10"},
		`ssdcache.io/warmup: "eager" is not allowed`:                                    {ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamWarmup: "eager"},
		// The CRD refuses it, so the class must too: no binding retried forever.
		`ssdcache.io/cache-size: cache size "0.5Gi"`: {ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamCacheSize: "0.5Gi"},
		`ssdcache.io/device-class: "NVMe" is not`:    {ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamDeviceClass: "NVMe"},
		`ssdcache.io/device-class="fast" needs`:      {ssdv1.ParamDeviceClass: "fast"},
	}
	for want, params := range bad {
		_, err := bindingSpecFromClass("data", class(ssdv1.DriverName, params))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("params %v: error %v, want one containing %q", params, err, want)
		}
	}
}

func TestSetControllerStatusHandsOverAtAdmission(t *testing.T) {
	b := &ssdv1.CacheBinding{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	setControllerStatus(b, waiting(pending(ssdv1.ReasonInsufficientCache, "needs room"), 1<<30))
	if b.Status.Phase != ssdv1.PhasePending || b.Status.NodeName != "" || b.Status.ResolvedSizeBytes != 1<<30 {
		t.Errorf("pending status = %+v", b.Status)
	}
	if !meta.IsStatusConditionTrue(b.Status.Conditions, ssdv1.ConditionPending) ||
		meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady).Reason != ssdv1.ReasonInsufficientCache {
		t.Errorf("pending conditions = %+v", b.Status.Conditions)
	}
	setControllerStatus(b, admitted(target{nodeName: "n1", volumeHandle: "v1"}, 1<<30))
	ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady)
	if b.Status.Phase != ssdv1.PhaseAdmitted || b.Status.NodeName != "n1" || ready.Reason != ssdv1.ReasonAttaching || ready.ObservedGeneration != 3 {
		t.Errorf("admitted status = %+v", b.Status)
	}
	// Once admitted, the agent owns Ready and the phase; the controller must not touch them.
	b.Status.Phase = ssdv1.PhaseAttached
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: ssdv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ssdv1.ReasonAttached})
	setControllerStatus(b, admitted(target{nodeName: "n1", volumeHandle: "v1"}, 1<<30))
	if b.Status.Phase != ssdv1.PhaseAttached || !meta.IsStatusConditionTrue(b.Status.Conditions, ssdv1.ConditionReady) {
		t.Errorf("controller overwrote the agent's status: %+v", b.Status)
	}
}
