package agent

import (
	"context"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;patch

// VolumeExpander grows a volume's origin LV: the CSI ControllerExpandVolume
// this same process serves (a volume's controller calls are served on the
// node that holds it).
type VolumeExpander interface {
	ControllerExpandVolume(context.Context, *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error)
}

// ResizeReconciler does external-resizer's part for the volumes of its node,
// which external-resizer cannot: it has no per-node mode, and an origin LV
// grows only on the node that holds it. When a claim asks for more than its
// PV holds, the origin is grown, the PV records the new size and the claim
// is marked for kubelet, which grows the filesystem (NodeExpandVolume,
// online) and updates the claim's capacity.
type ResizeReconciler struct {
	client client.Client
	// reader reads claims and PVs from the API server, uncached: the
	// manager's cache holds claims only as claimStubs and no PVs at all.
	reader   client.Reader
	recorder events.EventRecorder
	expander VolumeExpander
	driver   string
	nodeName string
}

// Retries: a volume busy with another operation is tried again soon; a
// failed expansion (a full volume group) after a while, with an Event each time.
const (
	resizeBusyRetry   = 2 * time.Second
	resizeFailedRetry = time.Minute
)

// NewResizeReconciler returns the reconciler of claims bound to driver's
// volumes on nodeName; it writes through c and reads through reader (the
// manager's APIReader).
func NewResizeReconciler(c client.Client, reader client.Reader, rec events.EventRecorder, e VolumeExpander, driver, nodeName string) *ResizeReconciler {
	return &ResizeReconciler{client: c, reader: reader, recorder: rec, expander: e, driver: driver, nodeName: nodeName}
}

// SetupWithManager watches the claims that ask for more than they have. The
// cache holds a claim only once the controller labelled it with this node;
// a claim that asked for more before that arrives as a new object when the
// label does, and passes the predicate then.
func (r *ResizeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("volume-resizer").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pvc, ok := o.(*corev1.PersistentVolumeClaim)
			return ok && wantsMore(pvc)
		}), predicate.Funcs{DeleteFunc: func(event.DeleteEvent) bool { return false }})).
		Complete(r)
}

// wantsMore: a bound claim whose request exceeds its capacity. It must read
// nothing claimStub drops.
func wantsMore(pvc *corev1.PersistentVolumeClaim) bool {
	want, have := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
	return pvc.Spec.VolumeName != "" && want.Cmp(have) > 0
}

// claimStub is the node's cached copy of a claim: its identity and, only
// while it wants more (rarely), what wantsMore reads. The cache holds only
// the claims the controller labelled with this node (CacheOptions); stubs
// keep even those small (a size list alone costs more than the rest of a
// stub), and Reconcile reads the whole claim from the API server, which it
// needs for its patches anyway.
func claimStub(o any) (any, error) {
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok {
		return o, nil
	}
	stub := &corev1.PersistentVolumeClaim{
		TypeMeta:   pvc.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Name, Namespace: pvc.Namespace, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
	}
	if wantsMore(pvc) {
		stub.Spec.VolumeName = pvc.Spec.VolumeName
		stub.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
		stub.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Status.Capacity[corev1.ResourceStorage]}
	}
	return stub, nil
}

// Reconcile grows the volume of one claim, if it is this node's to grow. It
// runs only for claims that want more, so its two uncached reads are rare;
// a cached PV read would hold every PV of the cluster from the first resize on.
func (r *ResizeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.reader.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !wantsMore(pvc) {
		return ctrl.Result{}, nil
	}
	pv := &corev1.PersistentVolume{}
	if err := r.reader.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want, have := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	switch {
	case !r.ours(pv):
		return ctrl.Result{}, nil
	case want.Cmp(have) > 0:
		return r.expand(ctx, pvc, pv, want)
	case !handedToKubelet(pvc, have):
		// Grown, but the status write after it failed: kubelet expands only
		// a claim marked for it.
		return ctrl.Result{}, r.markNodeResizePending(ctx, pvc, have, true)
	}
	return ctrl.Result{}, nil // kubelet's turn
}

// handedToKubelet: the claim has a resize status, or was allocated the PV's size.
func handedToKubelet(pvc *corev1.PersistentVolumeClaim, pvSize resource.Quantity) bool {
	_, marked := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]
	allocated := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	return marked || allocated.Cmp(pvSize) >= 0
}

// ours: a PV of this driver pinned to this node alone (ssdv1.PinnedNode, the
// controller's rule too). A PV whose affinity names several nodes is no
// node's: every named node's agent would grow it in its own volume group.
func (r *ResizeReconciler) ours(pv *corev1.PersistentVolume) bool {
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.driver {
		return false
	}
	node, _ := ssdv1.PinnedNode(pv)
	return node != "" && node == r.nodeName
}

// expand grows the origin to want, then records the size on the PV and
// hands the filesystem to kubelet through the claim's status.
func (r *ResizeReconciler) expand(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, want resource.Quantity) (ctrl.Result, error) {
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	r.recorder.Eventf(pvc, pv, corev1.EventTypeNormal, "Resizing", "Resize", "Growing volume %s from %s to %s", pv.Spec.CSI.VolumeHandle, have.String(), want.String())
	resp, err := r.expander.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId: pv.Spec.CSI.VolumeHandle, CapacityRange: &csi.CapacityRange{RequiredBytes: want.Value()},
	})
	if grpcstatus.Code(err) == codes.Aborted {
		return ctrl.Result{RequeueAfter: resizeBusyRetry}, nil
	}
	if err != nil {
		klog.ErrorS(err, "Growing volume", "volumeID", pv.Spec.CSI.VolumeHandle, "pvc", klog.KObj(pvc), "to", want.String())
		r.recorder.Eventf(pvc, pv, corev1.EventTypeWarning, "VolumeResizeFailed", "Resize", "Growing volume %s to %s: %v", pv.Spec.CSI.VolumeHandle, want.String(), err)
		return ctrl.Result{RequeueAfter: resizeFailedRetry}, nil
	}
	grown := *resource.NewQuantity(resp.GetCapacityBytes(), resource.BinarySI)
	pvBefore := pv.DeepCopy()
	pv.Spec.Capacity[corev1.ResourceStorage] = grown
	if err := r.client.Patch(ctx, pv, client.MergeFrom(pvBefore)); err != nil {
		return ctrl.Result{}, err
	}
	klog.InfoS("Grew volume; kubelet grows its filesystem", "volumeID", pv.Spec.CSI.VolumeHandle, "pvc", klog.KObj(pvc), "size", grown.String())
	if err := r.markNodeResizePending(ctx, pvc, grown, resp.GetNodeExpansionRequired()); err != nil {
		return ctrl.Result{}, err
	}
	r.recorder.Eventf(pvc, pv, corev1.EventTypeNormal, "FileSystemResizeRequired", "Resize", "Volume %s grown to %s; its filesystem grows on the node", pv.Spec.CSI.VolumeHandle, grown.String())
	return ctrl.Result{}, nil
}

// markNodeResizePending writes what external-resizer writes after the
// controller's part: the size allocated, and either a pending node resize
// (kubelet then calls NodeExpandVolume and sets the capacity) or the
// capacity itself.
func (r *ResizeReconciler) markNodeResizePending(ctx context.Context, pvc *corev1.PersistentVolumeClaim, grown resource.Quantity, nodeExpansion bool) error {
	before := pvc.DeepCopy()
	if pvc.Status.AllocatedResources == nil {
		pvc.Status.AllocatedResources = corev1.ResourceList{}
	}
	pvc.Status.AllocatedResources[corev1.ResourceStorage] = grown
	if !nodeExpansion {
		pvc.Status.Capacity[corev1.ResourceStorage] = grown
		delete(pvc.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
		return r.client.Status().Patch(ctx, pvc, client.MergeFrom(before))
	}
	if pvc.Status.AllocatedResourceStatuses == nil {
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{}
	}
	pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] = corev1.PersistentVolumeClaimNodeResizePending
	pvc.Status.Conditions = slices.DeleteFunc(pvc.Status.Conditions, func(c corev1.PersistentVolumeClaimCondition) bool {
		return c.Type == corev1.PersistentVolumeClaimFileSystemResizePending
	})
	pvc.Status.Conditions = append(pvc.Status.Conditions, corev1.PersistentVolumeClaimCondition{
		Type: corev1.PersistentVolumeClaimFileSystemResizePending, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
		Message: "Waiting for the node to grow the filesystem of the volume",
	})
	return r.client.Status().Patch(ctx, pvc, client.MergeFrom(before))
}
