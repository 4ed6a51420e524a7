package controller

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// SetupWithManager registers the reconciler and the watches that wake it: a binding
// depends on its PVC, the PVC's PV, the node's capacity, on capacity other
// bindings release, and on its namespace's cache limit.
func (r *BindingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.wake = make(chan event.GenericEvent, wakeBuffer)
	return ctrl.NewControllerManagedBy(mgr).
		Named("cachebinding").
		For(&ssdv1.CacheBinding{}).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfClaim)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfVolume)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfNode),
			builder.WithPredicates(nodeCapacityChanged())).
		Watches(&ssdv1.CacheBinding{}, handler.EnqueueRequestsFromMapFunc(r.pendingBeside),
			builder.WithPredicates(capacityReleased())).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfNamespace),
			builder.WithPredicates(namespaceLimitChanged())).
		// Decisions on the same node or limited namespace are serialised by the
		// arbiter; the others run side by side.
		WatchesRawSource(source.Channel(r.wake, handler.EnqueueRequestsFromMapFunc(r.pendingBeside))).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: r.workers}).
		Complete(r)
}

// wakeBuffer is how many failed admissions may wait for their wake-ups to be
// queued before a reconcile waits to hand over its own.
const wakeBuffer = 64

// wakeBeside wakes the bindings pendingBeside finds for b, whose failed
// status write admitted it in the arbiter's eyes for a moment: they may have
// been refused the room it took.
func (r *BindingReconciler) wakeBeside(ctx context.Context, b *ssdv1.CacheBinding) {
	if r.wake == nil {
		return
	}
	select {
	case r.wake <- event.GenericEvent{Object: b}:
	case <-ctx.Done():
	}
}

func (r *BindingReconciler) bindingsOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, client.InNamespace(o.GetName()))
}

// namespaceLimitChanged passes changes of a namespace's cache limit only.
func namespaceLimitChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			for _, l := range namespaceLimits() {
				if o[l.annotation] != n[l.annotation] {
					return true
				}
			}
			return false
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func (r *BindingReconciler) bindingsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requests(ctx, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexPVCName: o.GetName()})
}

func (r *BindingReconciler) bindingsOfVolume(ctx context.Context, o client.Object) []reconcile.Request {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok || pv.Spec.ClaimRef == nil {
		return nil
	}
	return r.requests(ctx, client.InNamespace(pv.Spec.ClaimRef.Namespace), client.MatchingFields{indexPVCName: pv.Spec.ClaimRef.Name})
}

// bindingsOfNode wakes the bindings admitted to the node (it may be gone) and the
// pending ones (its capacity may have grown or appeared).
func (r *BindingReconciler) bindingsOfNode(ctx context.Context, o client.Object) []reconcile.Request {
	return append(r.requests(ctx, client.MatchingFields{indexNodeName: o.GetName()}), r.pendingBindings(ctx, o)...)
}

// pendingBeside wakes the pending bindings whose admission a change of binding o
// may allow: the younger bindings of its PVC (they wait for it as duplicates,
// before any node is known for them, so unlabelled), those labelled with a node o
// was admitted to or is labelled with, and those of its namespace when the
// namespace has a limit. Waking every pending binding of the cluster on each
// admission made a burst quadratic.
func (r *BindingReconciler) pendingBeside(ctx context.Context, o client.Object) []reconcile.Request {
	b, ok := o.(*ssdv1.CacheBinding)
	if !ok {
		return nil
	}
	reqs := slices.DeleteFunc(r.requests(ctx, client.InNamespace(b.Namespace), client.MatchingFields{indexPVCName: b.Spec.PVCName}),
		func(req reconcile.Request) bool { return req.Name == b.Name })
	for i, node := range []string{b.Status.NodeName, b.Labels[ssdv1.LabelNode]} {
		if node != "" && (i == 0 || node != b.Status.NodeName) {
			reqs = append(reqs, r.requests(ctx, client.MatchingFields{indexNodeName: ""}, client.MatchingLabels{ssdv1.LabelNode: node})...)
		}
	}
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); err == nil && limited(ns) {
		reqs = append(reqs, r.requests(ctx, client.InNamespace(b.Namespace), client.MatchingFields{indexNodeName: ""})...)
	}
	slices.SortFunc(reqs, func(x, y reconcile.Request) int { return strings.Compare(x.String(), y.String()) })
	return slices.Compact(reqs)
}

// pendingBindings wakes every binding not admitted yet.
func (r *BindingReconciler) pendingBindings(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requests(ctx, client.MatchingFields{indexNodeName: ""})
}

func (r *BindingReconciler) requests(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &ssdv1.CacheBindingList{}
	if err := r.client.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		klog.FromContext(ctx).Error(err, "Listing CacheBindings to requeue failed")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, b := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
	}
	return reqs
}

// nodeCapacityChanged passes node creation, deletion and changes of the annotations
// admission reads (the cache pool's, its older capacity and its device class), not
// the periodic status updates.
func nodeCapacityChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			for _, a := range nodeAnnotations {
				if o[a] != n[a] {
					return true
				}
			}
			return false
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// capacityReleased passes binding changes that may free cache capacity on a node (or
// let a younger pending binding pass an older one that went away).
func capacityReleased() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*ssdv1.CacheBinding)
			n, okN := e.ObjectNew.(*ssdv1.CacheBinding)
			return okO && okN && (o.Status.NodeName != n.Status.NodeName ||
				o.Status.ResolvedSizeBytes != n.Status.ResolvedSizeBytes ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero())
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
