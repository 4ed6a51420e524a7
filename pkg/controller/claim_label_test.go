package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// boundClaim returns claim ns/name bound to pv, which is bound back to it.
func boundClaim(name string, pv *corev1.PersistentVolume) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: name, UID: pvc.UID}
	return pvc
}

func TestClaimNode(t *testing.T) {
	pinned := func(driver string, nodes ...string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
		pv := csiPV(driver, nodes...)
		return boundClaim("data", pv), pv
	}
	pvc, pv := pinned(ssdv1.DriverName, "node-a")
	if got, unpinned := claimNode(pvc, pv); got != "node-a" || unpinned != nil {
		t.Errorf("claim of a volume pinned to node-a: node %q (%v)", got, unpinned)
	}
	// The same node in two terms is still one node.
	pvc, pv = pinned(ssdv1.DriverName, "node-a", "node-a")
	if got, unpinned := claimNode(pvc, pv); got != "node-a" || unpinned != nil {
		t.Errorf("claim of a volume pinned twice to node-a: node %q (%v)", got, unpinned)
	}
	cases := map[string]func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume){
		// The PV controller writes the phase last.
		"not Bound yet": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := pinned(ssdv1.DriverName, "node-a")
			pvc.Status.Phase = corev1.ClaimPending
			return pvc, pv
		},
		"Lost": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := pinned(ssdv1.DriverName, "node-a")
			pvc.Status.Phase = corev1.ClaimLost
			return pvc, pv
		},
		"no volume": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, _ := pinned(ssdv1.DriverName, "node-a")
			pvc.Spec.VolumeName = ""
			return pvc, nil
		},
		"volume gone": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, _ := pinned(ssdv1.DriverName, "node-a")
			return pvc, nil
		},
		"another driver's volume": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			return pinned("other.example.com", "node-a")
		},
		"not a CSI volume": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) { return pinned("", "node-a") },
		"the volume of another claim": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := pinned(ssdv1.DriverName, "node-a")
			pv.Spec.ClaimRef.Name = "other"
			return pvc, pv
		},
		"the volume of a former claim of the same name": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := pinned(ssdv1.DriverName, "node-a")
			pv.Spec.ClaimRef.UID = "uid-before"
			return pvc, pv
		},
		"a volume bound to nothing": func() (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
			pvc, pv := pinned(ssdv1.DriverName, "node-a")
			pv.Spec.ClaimRef = nil
			return pvc, pv
		},
	}
	for name, setup := range cases {
		if got, unpinned := claimNode(setup()); got != "" || unpinned != nil {
			t.Errorf("%s: node %q (%v), want no label and nothing to report", name, got, unpinned)
		}
	}
	// A PV of this driver that names no single node can only have been
	// written by hand: no label, and a reason naming the PV and the form.
	unpinned := map[string][]string{
		"several nodes":                 {"node-a", "node-b"},
		"no node affinity":              nil,
		"a node name no label can hold": {fmt.Sprintf("node-%070d", 0)},
	}
	for name, nodes := range unpinned {
		pvc, pv := pinned(ssdv1.DriverName, nodes...)
		got, why := claimNode(pvc, pv)
		if got != "" || why == nil || !strings.Contains(why.Error(), "PV pv1 ") || !strings.Contains(why.Error(), ssdv1.TopologyKeyNode+", operator: In, values: [<node>]") {
			t.Errorf("%s: node %q, reason %v; want no label, and a reason naming PV pv1 and the one-node affinity", name, got, why)
		}
	}
}

// A claim whose PV of this driver allows several nodes gets no label (a
// label it had goes) and a Warning Event naming the PV, on every reconcile
// that finds it so; once the PV names one node, it gets that node.
func TestClaimLabelerReportsAVolumeOfSeveralNodes(t *testing.T) {
	pv := csiPV(ssdv1.DriverName, "node-a", "node-b")
	pvc := boundClaim("data", pv)
	pvc.Labels = map[string]string{ssdv1.LabelNode: "node-a"}
	w := newLabelWorld(t, pv, pvc)
	rec := &events.FakeRecorder{Events: make(chan string, 4), Verbose: true}
	w.r.recorder = rec
	if got := w.labels("data"); len(got) != 0 {
		t.Errorf("labels %v of a claim whose PV allows two nodes, want none", got)
	}
	select {
	case e := <-rec.Events:
		for _, want := range []string{"Warning " + EventVolumeNotPinned, "PV pv1 may live on several nodes [node-a node-b]", "claim data"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q lacks %q", e, want)
			}
		}
	default:
		t.Fatal("no event for a claim whose PV allows two nodes")
	}

	pinned := csiPV(ssdv1.DriverName, "node-b")
	pinned.Spec.ClaimRef = pv.Spec.ClaimRef
	pinned.ResourceVersion = ""
	if err := w.c.Delete(context.Background(), pv); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(context.Background(), pinned); err != nil {
		t.Fatal(err)
	}
	if got := w.labels("data"); got[ssdv1.LabelNode] != "node-b" {
		t.Errorf("labels %v once the PV names node-b alone, want %s=node-b", got, ssdv1.LabelNode)
	}
	if len(rec.Events) != 0 {
		t.Errorf("event %q for a claim whose PV names one node", <-rec.Events)
	}
}

// labelWorld is a fake API server holding claims and PVs, and the labeler
// reconciling through it; patches counts its writes.
type labelWorld struct {
	t       *testing.T
	c       client.Client
	r       *ClaimLabeler
	patches int
}

func newLabelWorld(t *testing.T, objs ...client.Object) *labelWorld {
	w := &labelWorld{t: t}
	w.c = interceptor.NewClient(fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			w.patches++
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	w.r = NewClaimLabeler(w.c, &events.FakeRecorder{}, Options{})
	return w
}

// labels reconciles claim ns/name and returns its labels afterwards.
func (w *labelWorld) labels(name string) map[string]string {
	w.t.Helper()
	key := client.ObjectKey{Namespace: "ns", Name: name}
	if _, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		w.t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := w.c.Get(context.Background(), key, pvc); err != nil {
		w.t.Fatal(err)
	}
	return pvc.Labels
}

// The labeler sets the node label on a claim of a pinned volume, leaving
// the user's labels alone, puts it back when someone changes or removes it,
// writes nothing when it is right, and removes it once the volume is gone.
func TestClaimLabelerFollowsTheVolume(t *testing.T) {
	pv := csiPV(ssdv1.DriverName, "node-a")
	pvc := boundClaim("data", pv)
	pvc.Labels = map[string]string{"app": "db"}
	w := newLabelWorld(t, pv, pvc)
	ctx := context.Background()

	if got := w.labels("data"); got[ssdv1.LabelNode] != "node-a" || got["app"] != "db" {
		t.Fatalf("labels %v, want %s=node-a beside app=db", got, ssdv1.LabelNode)
	}
	w.patches = 0
	if w.labels("data"); w.patches != 0 {
		t.Errorf("%d patches of a claim labelled right, want none", w.patches)
	}
	for _, tampered := range []string{"node-b", ""} {
		p := &corev1.PersistentVolumeClaim{}
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(pvc), p); err != nil {
			t.Fatal(err)
		}
		p.Labels[ssdv1.LabelNode] = tampered
		if err := w.c.Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got := w.labels("data"); got[ssdv1.LabelNode] != "node-a" {
			t.Errorf("label changed to %q by a user: now %v, want node-a again", tampered, got)
		}
	}
	if err := w.c.Delete(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if got := w.labels("data"); got["app"] != "db" || len(got) != 1 {
		t.Errorf("labels %v once the volume is gone, want only app=db", got)
	}
	// A claim nothing labels, and one that is gone, take no write.
	w.patches = 0
	w.labels("data")
	if _, err := w.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "gone"}}); err != nil || w.patches != 0 {
		t.Errorf("reconciling claims without label or gone: %v, %d patches", err, w.patches)
	}
}

// The claim watch passes what can change the label: a new claim, its
// volume and the label itself; not its status or size updates.
func TestClaimPlacementChanged(t *testing.T) {
	p := claimPlacementChanged()
	old := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data",
		Labels: map[string]string{ssdv1.LabelNode: "node-a"}}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}}
	changed := func(change func(*corev1.PersistentVolumeClaim)) bool {
		n := old.DeepCopy()
		change(n)
		return p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n})
	}
	if !p.Create(event.CreateEvent{Object: old}) || p.Delete(event.DeleteEvent{Object: old}) {
		t.Error("want creations passed and deletions dropped")
	}
	if changed(func(n *corev1.PersistentVolumeClaim) {
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		n.Annotations = map[string]string{"a": "b"}
	}) {
		t.Error("a capacity and annotation update passed")
	}
	for what, change := range map[string]func(*corev1.PersistentVolumeClaim){
		"volume":        func(n *corev1.PersistentVolumeClaim) { n.Spec.VolumeName = "pv2" },
		"phase":         func(n *corev1.PersistentVolumeClaim) { n.Status.Phase = corev1.ClaimBound },
		"label value":   func(n *corev1.PersistentVolumeClaim) { n.Labels[ssdv1.LabelNode] = "node-b" },
		"label removed": func(n *corev1.PersistentVolumeClaim) { delete(n.Labels, ssdv1.LabelNode) },
		"label emptied": func(n *corev1.PersistentVolumeClaim) { n.Labels[ssdv1.LabelNode] = "" },
	} {
		if !changed(change) {
			t.Errorf("a change of the claim's %s was dropped", what)
		}
	}
}

// A PV wakes the claim it is bound to; one bound to none wakes nothing.
func TestClaimOfVolume(t *testing.T) {
	pv := csiPV(ssdv1.DriverName, "node-a")
	boundClaim("data", pv)
	if reqs := claimOfVolume(context.Background(), pv); len(reqs) != 1 || reqs[0].Namespace != "ns" || reqs[0].Name != "data" {
		t.Errorf("requests %v, want ns/data", reqs)
	}
	pv.Spec.ClaimRef = nil
	if reqs := claimOfVolume(context.Background(), pv); len(reqs) != 0 {
		t.Errorf("requests %v for a PV bound to nothing", reqs)
	}
}
