package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// Only the label is written, with a merge patch: no update, so the
// controller cannot change anything else of a user's claim.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=patch

// ClaimLabeler labels each claim bound to a volume of this driver pinned to
// one node with that node (ssdv1.LabelNode), as the controller labels the
// bindings: each node plugin's cache then selects its own node's claims
// (agent.CacheOptions), whose growth its resizer must see, instead of every
// claim of the cluster. The label follows the claim's volume: it changes
// when the volume does, goes when the claim has no such volume any more, and
// is put back when someone else changes it. Like the binding's, it is a
// selector, not an authority: the resizer acts on the PV's node affinity.
//
// A volume of this driver lives on one node, so a PV of it whose required
// affinity allows several nodes (or none) can only be a static PV written by
// hand, and which node holds it is unknown. Its claim gets no label (naming
// one of the nodes, or the node of the pod using it, could hand the claim to
// an agent that does not hold the volume) and a Warning Event,
// EventVolumeNotPinned, says which PV and the form it must take.
type ClaimLabeler struct {
	client   client.Client
	recorder events.EventRecorder
	workers  int
}

// EventVolumeNotPinned is the reason of the Warning Event on a claim bound
// to a PV of this driver that is not pinned to exactly one node.
const EventVolumeNotPinned = "VolumeNotPinnedToOneNode"

// NewClaimLabeler returns the labeler of claims; c is normally the manager's
// cached client, which holds every claim and PV already (the binding
// reconciler watches both). Its reconciles wait on their patch, not the CPU,
// so it runs opts.Workers of them at once: a controller started in a
// cluster of many claims labels them all first.
func NewClaimLabeler(c client.Client, recorder events.EventRecorder, opts Options) *ClaimLabeler {
	return &ClaimLabeler{client: c, recorder: recorder, workers: opts.workers()}
}

// SetupWithManager wakes the labeler for a claim when its volume or its
// label changes, and when the PV it names (or named) is created, changed or
// deleted.
func (r *ClaimLabeler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("pvc-nodelabel").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(claimPlacementChanged())).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(claimOfVolume)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(r)
}

// Reconcile brings one claim's node label to the node its volume is pinned to.
func (r *ClaimLabeler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pv, err := r.volumeOf(ctx, pvc)
	if err != nil {
		return ctrl.Result{}, err
	}
	node, unpinned := claimNode(pvc, pv)
	if unpinned != nil {
		r.recorder.Eventf(pvc, pv, corev1.EventTypeWarning, EventVolumeNotPinned, "LabelClaimNode", "%v", unpinned)
	}
	if current, set := pvc.Labels[ssdv1.LabelNode]; current == node && set == (node != "") {
		return ctrl.Result{}, nil
	}
	if err := r.client.Patch(ctx, pvc, client.RawPatch(types.MergePatchType, nodeLabelPatch(node))); err != nil {
		// NotFound: the claim went since the cache saw it.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	klog.FromContext(ctx).V(2).Info("Labelled claim with the node of its volume", "pvc", klog.KObj(pvc), "node", node)
	return ctrl.Result{}, nil
}

// volumeOf returns the PV pvc names, nil when it names none or the PV does
// not exist (its creation wakes the claim again).
func (r *ClaimLabeler) volumeOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	if pvc.Spec.VolumeName == "" {
		return nil, nil
	}
	pv := &corev1.PersistentVolume{}
	if err := r.client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return pv, nil
}

// claimNode is the node pvc's label must name: the one node pv (the volume
// pvc names, nil when there is none) is pinned to when pvc is Bound and pv
// is of this driver and bound to pvc, else "" (no label). Like
// resolveTarget it waits for the phase, which the PV controller writes
// last (only a Bound claim can ask for more), so the label is no write
// between its own; and the value is a valid label already (kubelet labels
// the Node with the same topology value), unless the PV was written by hand.
// unpinned is why such a PV of this driver names no node the label can hold
// (several nodes, none, or an invalid label value), nil otherwise.
func claimNode(pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) (node string, unpinned error) {
	if pvc.Status.Phase != corev1.ClaimBound || pv == nil || pv.Name != pvc.Spec.VolumeName || !boundTo(pv, pvc) ||
		pv.Spec.CSI == nil || pv.Spec.CSI.Driver != ssdv1.DriverName {
		return "", nil
	}
	node, err := nodeFromAffinity(pv)
	var why *pendingError
	switch {
	case errors.As(err, &why):
		return "", notPinned(pvc, why.message)
	case err != nil:
		return "", err
	case len(validation.IsValidLabelValue(node)) > 0:
		return "", notPinned(pvc, fmt.Sprintf("PV %s names node %q, which no label value can hold", pv.Name, node))
	}
	return node, nil
}

// notPinned says what a claim whose PV names no single node misses and the
// PV's allowed form.
func notPinned(pvc *corev1.PersistentVolumeClaim, problem string) error {
	return fmt.Errorf("%s. A volume of %s lives on one node, so no node plugin watches claim %s for it (it cannot grow, nor be cached); "+
		"its PV's spec.nodeAffinity.required must name that node alone: {key: %s, operator: In, values: [<node>]}",
		problem, ssdv1.DriverName, pvc.Name, ssdv1.TopologyKeyNode)
}

// boundTo tells whether pv's claimRef names pvc (by UID once the PV
// controller filled it in): a claim naming another claim's volume is
// not that volume's, and gets no label from it.
func boundTo(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && ref.Namespace == pvc.Namespace && ref.Name == pvc.Name && (ref.UID == "" || ref.UID == pvc.UID)
}

// nodeLabelPatch sets the node label, or removes it when node is "".
func nodeLabelPatch(node string) []byte {
	value := "null"
	if node != "" {
		value = `"` + node + `"` // a valid label value needs no escaping
	}
	return []byte(`{"metadata":{"labels":{"` + ssdv1.LabelNode + `":` + value + `}}}`)
}

// claimPlacementChanged passes new claims and the changes of a claim's
// volume, phase or node label, not its other status or size updates.
func claimPlacementChanged() predicate.Predicate {
	return predicate.Funcs{
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*corev1.PersistentVolumeClaim)
			n, okN := e.ObjectNew.(*corev1.PersistentVolumeClaim)
			if !okO || !okN {
				return true
			}
			oldNode, oldSet := o.Labels[ssdv1.LabelNode]
			newNode, newSet := n.Labels[ssdv1.LabelNode]
			return o.Spec.VolumeName != n.Spec.VolumeName || o.Status.Phase != n.Status.Phase || oldNode != newNode || oldSet != newSet
		},
	}
}

// claimOfVolume wakes the claim a PV is bound to; on an update the
// handler maps the old PV too, so a claim the PV left is woken as well.
func claimOfVolume(_ context.Context, o client.Object) []reconcile.Request {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pv.Spec.ClaimRef.Namespace, Name: pv.Spec.ClaimRef.Name}}}
}
