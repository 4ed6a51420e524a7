package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// expanderFunc is a VolumeExpander that records its calls.
type expanderFunc struct {
	calls []*csi.ControllerExpandVolumeRequest
	err   error
}

func (e *expanderFunc) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	e.calls = append(e.calls, req)
	if e.err != nil {
		return nil, e.err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.CapacityRange.RequiredBytes, NodeExpansionRequired: true}, nil
}

// claimAndVolume is a bound claim asking for want, its PV of size have on node.
func claimAndVolume(driver, node, have, want string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(have)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "pvc-1"}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "app"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pvc-1",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(want)}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(have)}},
	}
	return pvc, pv
}

func reconcileResize(t *testing.T, e VolumeExpander, objs ...client.Object) (client.Client, *events.FakeRecorder, ctrl.Result) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).WithStatusSubresource(&corev1.PersistentVolumeClaim{}).Build()
	rec := events.NewFakeRecorder(10)
	res, err := NewResizeReconciler(c, c, rec, e, ssdv1.DriverName, "node-a").
		Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "app", Name: "data"}})
	if err != nil {
		t.Fatal(err)
	}
	return c, rec, res
}

// A claim grown from 1Gi to 2Gi on this node: the origin grows, the PV
// records 2Gi, and the claim waits for kubelet's filesystem resize.
func TestResizeGrowsTheOriginAndHandsTheFilesystemToKubelet(t *testing.T) {
	pvc, pv := claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
	e := &expanderFunc{}
	c, rec, _ := reconcileResize(t, e, pvc, pv)
	if len(e.calls) != 1 || e.calls[0].VolumeId != "pvc-1" || e.calls[0].CapacityRange.RequiredBytes != 2<<30 {
		t.Fatalf("ControllerExpandVolume calls %v, want one for pvc-1 of 2Gi", e.calls)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pv), pv); err != nil {
		t.Fatal(err)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Value() != 2<<30 {
		t.Fatalf("PV capacity %s, want 2Gi", got.String())
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	if st := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; st != corev1.PersistentVolumeClaimNodeResizePending {
		t.Fatalf("claim resize status %q, want %q", st, corev1.PersistentVolumeClaimNodeResizePending)
	}
	if got := pvc.Status.Capacity[corev1.ResourceStorage]; got.Value() != 1<<30 {
		t.Fatalf("claim capacity %s before kubelet grew the filesystem, want 1Gi still", got.String())
	}
	if len(pvc.Status.Conditions) != 1 || pvc.Status.Conditions[0].Type != corev1.PersistentVolumeClaimFileSystemResizePending {
		t.Fatalf("claim conditions %v, want FileSystemResizePending", pvc.Status.Conditions)
	}
	if got := drain(rec); !strings.Contains(got, "Normal Resizing") || !strings.Contains(got, "Normal FileSystemResizeRequired") {
		t.Fatalf("events %q", got)
	}

	// Once the PV holds the request, nothing more is the resizer's to do.
	_, _, _ = reconcileResize(t, e, pvc, pv)
	if len(e.calls) != 1 {
		t.Fatalf("the volume was grown again: %v", e.calls)
	}
}

// A volume grown whose claim was never marked (the status write after the
// PV's failed) is marked on the next reconcile: kubelet grows only the
// filesystems of marked claims. It is not grown twice.
func TestResizeMarksAClaimLeftUnmarked(t *testing.T) {
	pvc, pv := claimAndVolume(ssdv1.DriverName, "node-a", "2Gi", "2Gi")
	pvc.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("1Gi")
	e := &expanderFunc{}
	c, _, _ := reconcileResize(t, e, pvc, pv)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	if st := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; len(e.calls) != 0 || st != corev1.PersistentVolumeClaimNodeResizePending {
		t.Fatalf("calls %v, claim resize status %q: want no expansion and %q", e.calls, st, corev1.PersistentVolumeClaimNodeResizePending)
	}
}

// Claims of other nodes, other drivers or that ask for no more are left alone.
func TestResizeLeavesOtherVolumesAlone(t *testing.T) {
	for _, c := range []struct {
		name, driver, node, have, want string
	}{
		{"another node", ssdv1.DriverName, "node-b", "1Gi", "2Gi"},
		{"another driver", "ebs.csi.aws.com", "node-a", "1Gi", "2Gi"},
		{"no more asked", ssdv1.DriverName, "node-a", "2Gi", "2Gi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pvc, pv := claimAndVolume(c.driver, c.node, c.have, c.want)
			e := &expanderFunc{}
			reconcileResize(t, e, pvc, pv)
			if len(e.calls) != 0 {
				t.Fatalf("ControllerExpandVolume called: %v", e.calls)
			}
		})
	}
}

// A PV is this node's only when its affinity pins it to this node alone
// (issue 37): one naming this node and another, in one term or in two, is
// no node's, so no agent grows it in its own volume group; one naming this
// node alone, even twice, is this node's.
func TestResizeGrowsOnlyVolumesPinnedToThisNodeAlone(t *testing.T) {
	term := func(nodes ...string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}
	}
	for _, c := range []struct {
		name  string
		terms []corev1.NodeSelectorTerm
		grown bool
	}{
		{"this node and another in one term", []corev1.NodeSelectorTerm{term("node-a", "node-b")}, false},
		{"this node and another in two terms", []corev1.NodeSelectorTerm{term("node-a"), term("node-b")}, false},
		{"this node alone", []corev1.NodeSelectorTerm{term("node-a")}, true},
		{"this node alone, in two terms", []corev1.NodeSelectorTerm{term("node-a"), term("node-a")}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pvc, pv := claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
			pv.Spec.NodeAffinity.Required.NodeSelectorTerms = c.terms
			e := &expanderFunc{}
			reconcileResize(t, e, pvc, pv)
			if grown := len(e.calls) > 0; grown != c.grown {
				t.Fatalf("ControllerExpandVolume calls %v on node-a; want a call: %v", e.calls, c.grown)
			}
		})
	}
}

// A failed expansion (the volume group is full) leaves the PV as it was,
// says why in a Warning Event and tries again later; a busy volume is tried
// again soon, without an Event.
func TestResizeFailureIsReportedAndRetried(t *testing.T) {
	pvc, pv := claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
	full := &expanderFunc{err: grpcstatus.Error(codes.ResourceExhausted, "volume group ssdcache-hdd has 512 MiB free, 1 GiB asked")}
	c, rec, res := reconcileResize(t, full, pvc, pv)
	if res.RequeueAfter != resizeFailedRetry {
		t.Fatalf("result %+v, want a retry after %v", res, resizeFailedRetry)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pv), pv); err != nil {
		t.Fatal(err)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Value() != 1<<30 {
		t.Fatalf("PV capacity %s after a failed expansion, want 1Gi", got.String())
	}
	if got := drain(rec); !strings.Contains(got, "Warning VolumeResizeFailed") || !strings.Contains(got, "512 MiB free") {
		t.Fatalf("events %q, want the failure and its reason", got)
	}

	pvc, pv = claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
	busy := &expanderFunc{err: grpcstatus.Error(codes.Aborted, "an operation on volume pvc-1 is in progress")}
	_, rec, res = reconcileResize(t, busy, pvc, pv)
	if res.RequeueAfter != resizeBusyRetry || strings.Contains(drain(rec), "VolumeResizeFailed") {
		t.Fatalf("busy volume: result %+v; want a retry after %v and no failure event", res, resizeBusyRetry)
	}
}

func drain(rec *events.FakeRecorder) string {
	var b strings.Builder
	for {
		select {
		case e := <-rec.Events:
			b.WriteString(e + "\n")
		default:
			return b.String()
		}
	}
}

// The node's cache holds claims as claimStubs: what the resizer's watch
// needs to wake it, none of the claims' annotations, labels, finalizers or
// conditions, and no sizes unless the claim wants more, so each of its
// node's claims costs the node little.
func TestCacheOptionsKeepClaimsAsStubs(t *testing.T) {
	var transform func(any) (any, error)
	for o, by := range CacheOptions("node-a").ByObject {
		if _, ok := o.(*corev1.PersistentVolumeClaim); ok {
			transform = by.Transform
		}
	}
	if transform == nil {
		t.Fatal("CacheOptions caches whole claims: it has no transform for PersistentVolumeClaims")
	}
	pvc, _ := claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
	pvc.UID, pvc.ResourceVersion = "uid-1", "7"
	pvc.Annotations = map[string]string{"volume.kubernetes.io/selected-node": "node-a", "kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1000)}
	pvc.Labels = map[string]string{"app": "db"}
	pvc.Finalizers = []string{"kubernetes.io/pvc-protection"}
	pvc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing}}
	out, err := transform(pvc.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	stub := out.(*corev1.PersistentVolumeClaim)
	if stub.Name != "data" || stub.Namespace != "app" || stub.UID != "uid-1" || stub.ResourceVersion != "7" || !wantsMore(stub) {
		t.Fatalf("stub %+v lost the claim's identity or its growth", stub)
	}
	if stub.Annotations != nil || stub.Labels != nil || stub.Finalizers != nil || stub.ManagedFields != nil ||
		stub.Spec.AccessModes != nil || stub.Status.Phase != "" || stub.Status.Conditions != nil {
		t.Fatalf("stub keeps more than the resizer reads: %+v", stub)
	}
	pvc.Status.Capacity[corev1.ResourceStorage] = resource.MustParse("2Gi")
	out, _ = transform(pvc.DeepCopy())
	if stub := out.(*corev1.PersistentVolumeClaim); wantsMore(stub) || stub.Spec.Resources.Requests != nil || stub.Status.Capacity != nil {
		t.Fatalf("the stub of a claim that has what it asks for wants more or keeps its sizes: %+v", stub)
	}
}

// The node's cache holds only the claims the controller labelled with its
// node (ssdv1.LabelNode), as it does the bindings: an unlabelled claim, or
// one of another node, costs the node nothing, and it sees a claim once the
// label arrives.
func TestCacheOptionsSelectOnlyThisNodesClaims(t *testing.T) {
	var selector labels.Selector
	for o, by := range CacheOptions("node-a").ByObject {
		if _, ok := o.(*corev1.PersistentVolumeClaim); ok {
			selector = by.Label
		}
	}
	if selector == nil {
		t.Fatal("CacheOptions caches the claims of every node: it has no label selector for PersistentVolumeClaims")
	}
	for set, want := range map[string]bool{"node-a": true, "node-b": false, "": false} {
		l := labels.Set{"app": "db"}
		if set != "" {
			l[ssdv1.LabelNode] = set
		}
		if got := selector.Matches(l); got != want {
			t.Errorf("claim labelled %v: selected %v, want %v", l, got, want)
		}
	}
}

// The resizer reads claims and PVs from the API server, never from the
// manager's cache, which holds claims as stubs and must hold no PVs: a
// cached PV read would start an informer on every PV of the cluster.
func TestResizeReadsTheAPIServerNotTheCache(t *testing.T) {
	pvc, pv := claimAndVolume(ssdv1.DriverName, "node-a", "1Gi", "2Gi")
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: "Custom", Status: corev1.ConditionTrue}}
	server := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(pvc, pv).WithStatusSubresource(&corev1.PersistentVolumeClaim{}).Build()
	var cachedReads []string
	cached := interceptor.NewClient(server, interceptor.Funcs{
		Get: func(_ context.Context, _ client.WithWatch, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			cachedReads = append(cachedReads, fmt.Sprintf("%T %s", obj, key))
			return fmt.Errorf("read of %s through the cache", key)
		},
	})
	e := &expanderFunc{}
	_, err := NewResizeReconciler(cached, server, events.NewFakeRecorder(10), e, ssdv1.DriverName, "node-a").
		Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pvc)})
	if err != nil || len(cachedReads) != 0 {
		t.Fatalf("reconcile: %v; reads through the cache: %v", err, cachedReads)
	}
	if len(e.calls) != 1 {
		t.Fatalf("ControllerExpandVolume calls %v, want one", e.calls)
	}
	if err := server.Get(context.Background(), client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	if len(pvc.Status.Conditions) != 2 || pvc.Status.Conditions[0].Type != "Custom" {
		t.Fatalf("claim conditions %v, want the claim's own kept beside FileSystemResizePending", pvc.Status.Conditions)
	}
}
