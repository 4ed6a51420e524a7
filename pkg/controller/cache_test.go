package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestTrimmedCacheKeepsPreloadPaths: the controller caches bindings without
// spec.preloadPaths (CacheOptions); the patches it writes from such a copy,
// the finalizer and node label and then the admission, must leave the
// paths on the API server.
func TestTrimmedCacheKeepsPreloadPaths(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.volume("a", "10Gi")
	w.binding("a", "1Gi", 0, nil)
	paths := []string{"models/big.bin", "index"}
	b := w.get("a")
	b.Finalizers, b.Spec.PreloadPaths = nil, paths
	if err := w.c.Update(w.ctx, b); err != nil {
		t.Fatal(err)
	}
	b = w.get("a")
	trimmed, err := trimBinding(b)
	if err != nil || len(trimmed.(*ssdv1.CacheBinding).Spec.PreloadPaths) != 0 {
		t.Fatalf("trimBinding kept %v (%v)", trimmed.(*ssdv1.CacheBinding).Spec.PreloadPaths, err)
	}
	if err := w.r.ensureMeta(w.ctx, b, testNode); err != nil {
		t.Fatal(err)
	}
	d, err := w.r.decide(w.ctx, b)
	if err != nil || !d.admit {
		t.Fatalf("decision %+v, %v; want admitted", d, err)
	}
	if _, err := w.r.applyDecision(w.ctx, b, d); err != nil {
		t.Fatal(err)
	}
	got := w.get("a")
	if !slices.Equal(got.Spec.PreloadPaths, paths) || got.Status.NodeName != testNode || got.Labels[ssdv1.LabelNode] != testNode {
		t.Errorf("after the controller's patches: preloadPaths %v, node %q, label %q; want %v kept, admitted and labelled",
			got.Spec.PreloadPaths, got.Status.NodeName, got.Labels[ssdv1.LabelNode], paths)
	}
}

// fullObjects returns a claim, its PV of this driver and their Node as a
// cluster holds them: with annotations, labels, finalizers, a Node's images
// and conditions, which the controller never reads.
func fullObjects() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume, *corev1.Node) {
	pv := csiPV(ssdv1.DriverName, testNode)
	pv.Annotations = map[string]string{"pv.kubernetes.io/provisioned-by": ssdv1.DriverName}
	pv.Finalizers = []string{"kubernetes.io/pv-protection"}
	pv.Spec.CSI.VolumeAttributes = map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1733-8081-ssdcache.io"}
	pv.Spec.MountOptions = []string{"noatime"}
	pv.Status.Phase = corev1.VolumeBound
	pvc := boundClaim("data", pv)
	class := "ssdcache"
	pvc.Spec.StorageClassName = &class
	pvc.Labels = map[string]string{"app": "db", ssdv1.LabelNode: testNode}
	pvc.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 400)}
	pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")}
	pvc.Status.Capacity = pvc.Spec.Resources.Requests
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{"kubernetes.io/hostname": testNode},
		Annotations: map[string]string{ssdv1.AnnotationCachePoolBytes: "1099511627776", ssdv1.AnnotationCacheExtentBytes: "4194304",
			ssdv1.AnnotationCacheBlockBytes: "98304", ssdv1.AnnotationDeviceClass: "nvme", "csi.volume.kubernetes.io/nodeid": `{"ssdcache.io":"` + testNode + `"}`}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{strings.Repeat("i", 200)}, SizeBytes: 1 << 30}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	return pvc, pv, node
}

// The trimmed copies the controller caches give every reader the answers
// the whole objects give: the target a binding resolves to, the claim's
// node label, the Node's cache pool and device class, and the watches'
// predicates and mappings; and they hold none of the fields dropped.
func TestTrimmedCopiesAnswerAsTheWholeObjects(t *testing.T) {
	pvc, pv, node := fullObjects()
	trimmedPVC, _ := trimClaim(pvc.DeepCopy())
	trimmedPV, _ := trimVolume(pv.DeepCopy())
	trimmedNode, _ := trimNode(node.DeepCopy())
	tc, tv, tn := trimmedPVC.(*corev1.PersistentVolumeClaim), trimmedPV.(*corev1.PersistentVolume), trimmedNode.(*corev1.Node)

	b := &ssdv1.CacheBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}, Spec: ssdv1.CacheBindingSpec{PVCName: "data"}}
	answers := func(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, node *corev1.Node) string {
		c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pvc, pv, node).Build()
		target, err := resolveTarget(context.Background(), c, b)
		labelNode, unpinned := claimNode(pvc, pv)
		pool, poolErr := parseNodeCache(node)
		class, annotation := deviceClassOf(node)
		return fmt.Sprintf("target %+v %v; label %q %v; pool %+v %v; class %q %q; claim of volume %v; class %q",
			target, err, labelNode, unpinned, pool, poolErr, class, annotation, claimOfVolume(context.Background(), pv), *pvc.Spec.StorageClassName)
	}
	whole, trimmed := answers(pvc.DeepCopy(), pv.DeepCopy(), node.DeepCopy()), answers(tc, tv, tn)
	if whole != trimmed {
		t.Errorf("trimmed copies answer\n%s\nwhole objects\n%s", trimmed, whole)
	}
	if len(tc.Annotations)+len(tv.Annotations)+len(tv.Finalizers)+len(tv.Spec.CSI.VolumeAttributes)+len(tv.Spec.MountOptions)+
		len(tn.Status.Images)+len(tn.Status.Conditions)+len(tn.Labels) != 0 || tc.Labels["app"] != "" || tc.Status.Capacity != nil ||
		tn.Annotations["csi.volume.kubernetes.io/nodeid"] != "" {
		t.Errorf("trimmed copies keep fields nothing reads: claim %+v, PV %+v, node %+v", tc, tv, tn)
	}
}

// A PV of another driver keeps only its claim and driver, which
// targetFromPV names in its reason; one that is not CSI stays without CSI.
func TestTrimmedVolumeOfAnotherDriver(t *testing.T) {
	for _, driver := range []string{"ebs.csi.aws.com", ""} {
		pv := csiPV(driver, testNode)
		boundClaim("data", pv)
		kept, _ := trimVolume(pv.DeepCopy())
		_, wholeErr := targetFromPV(pv)
		_, keptErr := targetFromPV(kept.(*corev1.PersistentVolume))
		if fmt.Sprint(wholeErr) != fmt.Sprint(keptErr) || kept.(*corev1.PersistentVolume).Spec.NodeAffinity != nil {
			t.Errorf("driver %q: trimmed PV %+v says %v, the whole one %v", driver, kept, keptErr, wholeErr)
		}
	}
}

// The updates the watches let through are the same for trimmed copies.
func TestTrimmedCopiesPassTheSamePredicates(t *testing.T) {
	pvc, _, node := fullObjects()
	moved := pvc.DeepCopy()
	moved.Labels[ssdv1.LabelNode] = "elsewhere"
	grown := node.DeepCopy()
	grown.Annotations[ssdv1.AnnotationCachePoolBytes] = "2199023255552"
	trim := func(f func(any) (any, error), o client.Object) client.Object {
		kept, _ := f(o.DeepCopyObject())
		return kept.(client.Object)
	}
	for name, c := range map[string]struct {
		p        func(event.UpdateEvent) bool
		old, new client.Object
		f        func(any) (any, error)
	}{
		"claim label": {claimPlacementChanged().Update, pvc, moved, trimClaim},
		"node pool":   {nodeCapacityChanged().Update, node, grown, trimNode},
	} {
		if !c.p(event.UpdateEvent{ObjectOld: trim(c.f, c.old), ObjectNew: trim(c.f, c.new)}) {
			t.Errorf("%s: the change of a trimmed copy is dropped", name)
		}
	}
}
