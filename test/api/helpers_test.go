package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

const (
	pollInterval = 50 * time.Millisecond
	// Generous: the API server and controller share two cores with the test.
	pollTimeout = 30 * time.Second
)

// eventually polls check until it returns nil and fails the test with check's last
// error when it never does.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, pollTimeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within %v: %v", what, pollTimeout, last)
	}
}

func newNamespace(t *testing.T, ctx context.Context, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6)}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func uniqueName(prefix string) string { return prefix + "-" + rand.String(5) }

func createNode(t *testing.T, ctx context.Context, c client.Client, capacity string) string {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("node")}}
	if capacity != "" {
		node.Annotations = map[string]string{ssdv1.AnnotationCacheCapacityBytes: capacity}
	}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	return node.Name
}

// setAnnotation sets one annotation of the cluster-scoped object name (a
// Node, a Namespace) of obj's kind, as a node agent or an operator does.
func setAnnotation(t *testing.T, ctx context.Context, c client.Client, obj client.Object, name, key, value string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			return err
		}
		annotations := obj.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[key] = value
		obj.SetAnnotations(annotations)
		return c.Update(ctx, obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// volume describes a PV/PVC pair to create; the PV controller does not run under
// envtest, so the test binds them itself as it would.
type volume struct {
	pvc, storageClass, driver, node string
	size                            string
	unbound                         bool
}

func createVolume(t *testing.T, ctx context.Context, c client.Client, ns string, v volume) *corev1.PersistentVolumeClaim {
	t.Helper()
	if v.driver == "" {
		v.driver = ssdv1.DriverName
	}
	if v.size == "" {
		v.size = "100Gi"
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.pvc, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(v.size)}},
		},
	}
	if v.storageClass != "" {
		pvc.Spec.StorageClassName = &v.storageClass
	}
	if err := c.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	if !v.unbound {
		bindVolume(t, ctx, c, pvc, v)
	}
	return pvc
}

// bindVolume creates the PV and marks the PVC Bound, as the PV controller would.
func bindVolume(t *testing.T, ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim, v volume) {
	t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + pvc.Namespace + "-" + pvc.Name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(v.size)},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:    &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: v.driver, VolumeHandle: "vol-" + pvc.Name},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{v.node}}},
			}}}},
		},
	}
	if v.storageClass != "" {
		pv.Spec.StorageClassName = v.storageClass
	}
	if err := c.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
			return err
		}
		pvc.Spec.VolumeName = pv.Name
		if err := c.Update(ctx, pvc); err != nil {
			return err
		}
		pvc.Status.Phase = corev1.ClaimBound
		return c.Status().Update(ctx, pvc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func createStorageClass(t *testing.T, ctx context.Context, c client.Client, params map[string]string) string {
	t.Helper()
	mode := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: uniqueName("sc")},
		Provisioner:       ssdv1.DriverName,
		Parameters:        params,
		VolumeBindingMode: &mode,
	}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	return sc.Name
}

func createBinding(t *testing.T, ctx context.Context, c client.Client, ns, name, pvc, size string) *ssdv1.CacheBinding {
	t.Helper()
	b := &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       ssdv1.CacheBindingSpec{PVCName: pvc, Size: size},
	}
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func getBinding(ctx context.Context, c client.Client, ns, name string) (*ssdv1.CacheBinding, error) {
	b := &ssdv1.CacheBinding{}
	return b, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b)
}

// waitAdmitted waits until the binding is admitted to node with size bytes.
func waitAdmitted(t *testing.T, c client.Client, ns, name, node string, size int64) *ssdv1.CacheBinding {
	t.Helper()
	var b *ssdv1.CacheBinding
	eventually(t, "binding "+name+" admitted to "+node, func(ctx context.Context) (err error) {
		if b, err = getBinding(ctx, c, ns, name); err != nil {
			return err
		}
		return checkAdmitted(b, node, size)
	})
	return b
}

func checkAdmitted(b *ssdv1.CacheBinding, node string, size int64) error {
	st := b.Status
	pending := meta.FindStatusCondition(st.Conditions, ssdv1.ConditionPending)
	switch {
	case st.NodeName != node || st.ResolvedSizeBytes != size:
		return fmt.Errorf("node %q size %d, want %q and %d (pending: %+v)", st.NodeName, st.ResolvedSizeBytes, node, size, pending)
	case pending == nil || pending.Status != metav1.ConditionFalse || pending.Reason != ssdv1.ReasonAdmitted:
		return fmt.Errorf("pending condition %+v, want False/Admitted", pending)
	case pending.ObservedGeneration != b.Generation || st.ObservedGeneration != b.Generation:
		return fmt.Errorf("observed generation %d/%d, want %d", pending.ObservedGeneration, st.ObservedGeneration, b.Generation)
	}
	return nil
}

// waitPending waits until the binding is Pending for reason with a message containing msg.
func waitPending(t *testing.T, c client.Client, ns, name, reason, msg string) *ssdv1.CacheBinding {
	t.Helper()
	var b *ssdv1.CacheBinding
	eventually(t, "binding "+name+" pending with "+reason, func(ctx context.Context) (err error) {
		if b, err = getBinding(ctx, c, ns, name); err != nil {
			return err
		}
		p := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending)
		switch {
		case p == nil || p.Status != metav1.ConditionTrue || p.Reason != reason || !strings.Contains(p.Message, msg):
			return fmt.Errorf("pending condition %+v, want True/%s with %q", p, reason, msg)
		case b.Status.Phase != ssdv1.PhasePending || b.Status.NodeName != "":
			return fmt.Errorf("phase %q node %q, want Pending and no node", b.Status.Phase, b.Status.NodeName)
		}
		return nil
	})
	return b
}

// waitEvent waits for an Event about the object with the given reason and a note
// containing note.
func waitEvent(t *testing.T, c client.Client, ns, objName, reason, note string) {
	t.Helper()
	waitEventOn(t, c, ns, "", objName, reason, note)
}

// waitEventOn is waitEvent for an object of kind ("" for any).
func waitEventOn(t *testing.T, c client.Client, ns, kind, objName, reason, note string) {
	t.Helper()
	eventually(t, "event "+reason+" on "+kind+" "+objName, func(ctx context.Context) error {
		list := &eventsv1.EventList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == objName && (kind == "" || e.Regarding.Kind == kind) && e.Reason == reason && strings.Contains(e.Note, note) {
				if e.ReportingController != "ssdcache-controller" {
					return fmt.Errorf("event from %q, want ssdcache-controller", e.ReportingController)
				}
				return nil
			}
			seen = append(seen, e.Regarding.Name+"/"+e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no such event among %q", seen)
	})
}

// removeFinalizer does what the node agent does after detaching.
func removeFinalizer(t *testing.T, ctx context.Context, c client.Client, obj client.Object, finalizer string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		fs := obj.GetFinalizers()
		kept := fs[:0]
		for _, f := range fs {
			if f != finalizer {
				kept = append(kept, f)
			}
		}
		obj.SetFinalizers(kept)
		return c.Update(ctx, obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	eventually(t, obj.GetName()+" deleted", func(ctx context.Context) error {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if err == nil {
			return fmt.Errorf("still there, finalizers %v", obj.GetFinalizers())
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		return nil
	})
}
