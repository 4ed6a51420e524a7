package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// Generous: the API server and controller share two cores with the test.
const pollTimeout = 30 * time.Second

// eventually polls check until it returns nil and fails the test with check's last
// error when it never does.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within %v: %v", what, pollTimeout, last)
	}
}

// create creates obj and returns it as the API server stored it.
func create[T client.Object](t *testing.T, ctx context.Context, c client.Client, obj T) T {
	t.Helper()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func uniqueName(prefix string) string { return prefix + "-" + rand.String(5) }

func newNamespace(t *testing.T, ctx context.Context, c client.Client) string {
	t.Helper()
	return create(t, ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("t")}}).Name
}

func createNode(t *testing.T, ctx context.Context, c client.Client, capacity string) string {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("node")}}
	if capacity != "" {
		node.Annotations = map[string]string{ssdv1.AnnotationCacheCapacityBytes: capacity}
	}
	return create(t, ctx, c, node).Name
}

// setAnnotation sets one annotation of the cluster-scoped object name (a Node, a
// Namespace) of obj's kind with a merge patch, as a node agent or `kubectl annotate` does.
func setAnnotation(t *testing.T, ctx context.Context, c client.Client, obj client.Object, name, key, value string) {
	t.Helper()
	obj.SetName(name)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// update applies change to the API server's copy of obj, retrying when the
// controller wrote it in between.
func update(t *testing.T, ctx context.Context, c client.Client, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return c.Update(ctx, obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// removeFinalizer does what the node agent does after detaching.
func removeFinalizer(t *testing.T, ctx context.Context, c client.Client, obj client.Object, finalizer string) {
	t.Helper()
	update(t, ctx, c, obj, func() { controllerutil.RemoveFinalizer(obj, finalizer) })
}

// volume describes a PV/PVC pair to create; the PV controller does not run under
// envtest, so the test binds them itself as it would.
type volume struct {
	pvc, storageClass, driver, node string
	size                            string // default 100Gi
	unbound                         bool
}

func createVolume(t *testing.T, ctx context.Context, c client.Client, ns string, v volume) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.pvc, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(cmp.Or(v.size, "100Gi"))}},
		},
	}
	if v.storageClass != "" {
		pvc.Spec.StorageClassName = &v.storageClass
	}
	create(t, ctx, c, pvc)
	if !v.unbound {
		bindVolume(t, ctx, c, pvc, v.driver, v.node)
	}
	return pvc
}

// bindVolume creates a PV of driver ("" for ssdcache's) on node for pvc and marks
// the PVC Bound, as the PV controller would. Nothing else writes PVCs under
// envtest, so no update can conflict.
func bindVolume(t *testing.T, ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim, driver, node string) {
	t.Helper()
	pv := create(t, ctx, c, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + pvc.Namespace + "-" + pvc.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         pvc.Spec.Resources.Requests,
			AccessModes:      pvc.Spec.AccessModes,
			StorageClassName: ptr.Deref(pvc.Spec.StorageClassName, ""),
			ClaimRef:         &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: cmp.Or(driver, ssdv1.DriverName), VolumeHandle: "vol-" + pvc.Name},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	})
	pvc.Spec.VolumeName = pv.Name
	if err := c.Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if err := c.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

func createStorageClass(t *testing.T, ctx context.Context, c client.Client, params map[string]string) string {
	t.Helper()
	return create(t, ctx, c, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("sc")}, Provisioner: ssdv1.DriverName, Parameters: params,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}).Name
}

func createBinding(t *testing.T, ctx context.Context, c client.Client, ns, name, pvc, size string) *ssdv1.CacheBinding {
	t.Helper()
	return create(t, ctx, c, &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       ssdv1.CacheBindingSpec{PVCName: pvc, Size: size},
	})
}

// getBinding reads into a new object: Get into a used one keeps fields the
// API server has since dropped.
func getBinding(ctx context.Context, c client.Client, ns, name string) (*ssdv1.CacheBinding, error) {
	b := &ssdv1.CacheBinding{}
	return b, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b)
}

func waitBinding(t *testing.T, c client.Client, ns, name, what string, check func(*ssdv1.CacheBinding) error) *ssdv1.CacheBinding {
	t.Helper()
	var b *ssdv1.CacheBinding
	eventually(t, "binding "+name+" "+what, func(ctx context.Context) (err error) {
		if b, err = getBinding(ctx, c, ns, name); err != nil {
			return err
		}
		return check(b)
	})
	return b
}

// waitAdmitted waits until the binding is admitted to node with size bytes.
func waitAdmitted(t *testing.T, c client.Client, ns, name, node string, size int64) *ssdv1.CacheBinding {
	t.Helper()
	return waitBinding(t, c, ns, name, "admitted to "+node, func(b *ssdv1.CacheBinding) error {
		st := b.Status
		p := meta.FindStatusCondition(st.Conditions, ssdv1.ConditionPending)
		switch {
		case st.NodeName != node || st.ResolvedSizeBytes != size:
			return fmt.Errorf("node %q size %d, want %q and %d (pending: %+v)", st.NodeName, st.ResolvedSizeBytes, node, size, p)
		case p == nil || p.Status != metav1.ConditionFalse || p.Reason != ssdv1.ReasonAdmitted:
			return fmt.Errorf("pending condition %+v, want False/Admitted", p)
		case p.ObservedGeneration != b.Generation || st.ObservedGeneration != b.Generation:
			return fmt.Errorf("observed generation %d/%d, want %d", p.ObservedGeneration, st.ObservedGeneration, b.Generation)
		}
		return nil
	})
}

// waitPending waits until the binding is Pending for reason with a message containing msg.
func waitPending(t *testing.T, c client.Client, ns, name, reason, msg string) *ssdv1.CacheBinding {
	t.Helper()
	return waitBinding(t, c, ns, name, "pending with "+reason, func(b *ssdv1.CacheBinding) error {
		p := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending)
		switch {
		case p == nil || p.Status != metav1.ConditionTrue || p.Reason != reason || !strings.Contains(p.Message, msg):
			return fmt.Errorf("pending condition %+v, want True/%s with %q", p, reason, msg)
		case b.Status.Phase != ssdv1.PhasePending || b.Status.NodeName != "":
			return fmt.Errorf("phase %q node %q, want Pending and no node", b.Status.Phase, b.Status.NodeName)
		}
		return nil
	})
}

// waitEvent waits for ssdcache-controller's Event about the object kind/name with
// the given reason and a note containing note.
func waitEvent(t *testing.T, c client.Client, ns, kind, name, reason, note string) {
	t.Helper()
	eventually(t, "event "+reason+" on "+kind+" "+name, func(ctx context.Context) error {
		list := &eventsv1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, note) {
				if e.ReportingController != "ssdcache-controller" {
					return fmt.Errorf("event from %q, want ssdcache-controller", e.ReportingController)
				}
				return nil
			}
			seen = append(seen, e.Regarding.Kind+"/"+e.Regarding.Name+"/"+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no such event among %q", seen)
	})
}

func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	eventually(t, obj.GetName()+" deleted", func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there, finalizers %v (%v)", obj.GetFinalizers(), err)
		}
		return nil
	})
}
