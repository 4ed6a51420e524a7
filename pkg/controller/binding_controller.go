package controller

import (
	"context"
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups=ssdcache.io,resources=cachebindings,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=ssdcache.io,resources=cachebindings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ssdcache.io,resources=cachebindings/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Leader election still reports through the core/v1 Events API.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// BindingReconciler admits CacheBindings to the node holding their volume, within
// that node's cache capacity, and owns their status up to admission. The node agent
// takes over from status.nodeName on (attach, Ready, Degraded, figures, detach).
type BindingReconciler struct {
	client        client.Client
	reader        client.Reader // uncached: the agents' Leases, and a namespace's admissions (quota.go)
	recorder      events.EventRecorder
	pendingResync time.Duration
	agents        agentLeases
	workers       int
	arbiter       arbiter
	// unseen holds the status writes decided but not shown by the cache yet.
	unseen unseenWrites
	// wake takes bindings whose failed admission kept room from others on their
	// node and namespace (pendingBeside); nil until SetupWithManager.
	wake chan event.GenericEvent
}

// NewBindingReconciler returns a reconciler that reads through c (normally the
// manager's cached client), reads the node agents' Leases through reader
// (uncached) and reports state changes as Events through recorder.
func NewBindingReconciler(c client.Client, reader client.Reader, recorder events.EventRecorder, opts Options) *BindingReconciler {
	return &BindingReconciler{client: c, reader: reader, recorder: recorder, pendingResync: opts.pendingResync(),
		agents: newAgentLeases(reader, opts), workers: opts.workers()}
}

// conflictRetry is the delay before retrying a write that lost an optimistic-lock race.
const conflictRetry = 200 * time.Millisecond

// Reconcile admits or releases one binding. A write conflict is not an error: the
// cache had not seen a newer version (often our own last write) yet, and the retry
// works on fresh data.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("Write conflict, retrying on fresh data", "err", err)
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// reconcile runs the steps: release on deletion, make sure of the finalizer and
// the node label, decide admission holding the locks of its node and namespace,
// write the status.
func (r *BindingReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &ssdv1.CacheBinding{}
	if err := r.client.Get(ctx, req.NamespacedName, b); err != nil {
		if apierrors.IsNotFound(err) {
			r.unseen.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.unseen.behind(b) {
		// Our last status write of b succeeded and the cache does not show it
		// yet: a decision on this copy would only lose the write's optimistic
		// lock. The write's own watch event brings b back.
		return ctrl.Result{}, nil
	}
	if !b.DeletionTimestamp.IsZero() {
		// The agent's Lease is not watched: look again until it releases the binding.
		return ctrl.Result{RequeueAfter: r.agents.recheck()}, r.reconcileDelete(ctx, b)
	}
	node := ""
	if t, err := resolveTarget(ctx, r.client, b); err == nil {
		node = t.nodeName
	} else if _, err := asPending(err); err != nil {
		return ctrl.Result{}, err
	}
	readVersion := b.ResourceVersion
	// Before the locks: the patch's round trip decides nothing.
	if err := r.ensureMeta(ctx, b, node); err != nil {
		return ctrl.Result{}, err
	}
	d, decided, err := r.decideHeld(ctx, b, node, readVersion)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !decided {
		// The volume was bound, or moved, since it was resolved: decide again
		// holding the lock of the node it is on now, and label it with that node.
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	if err := r.writeDecision(ctx, b, d); err != nil {
		return ctrl.Result{}, err
	}
	if !d.admit {
		// Watches cover PVC, PV, Node and capacity changes; this resync only guards
		// against a missed event leaving a binding pending for good.
		return ctrl.Result{RequeueAfter: r.pendingResync}, nil
	}
	return ctrl.Result{}, nil
}

// writeDecision writes the status d gives b, which decideHeld recorded in
// r.unseen. Unless the write succeeds the record goes; when the write failed
// (or panicked) after the record admitted b, the pending bindings it kept room
// from are woken to decide again.
func (r *BindingReconciler) writeDecision(ctx context.Context, b *ssdv1.CacheBinding, d decision) error {
	key := client.ObjectKeyFromObject(b)
	wrote, failed := false, true
	defer func() {
		if !wrote && r.unseen.forget(key) && failed {
			r.wakeBeside(ctx, b)
		}
	}()
	wrote, err := r.applyDecision(ctx, b, d)
	failed = err != nil
	return err
}

// ensureMeta adds, in one patch written before any admission, the finalizer that
// makes deletion wait for the detach and the label naming the node of the
// binding's volume ("" while unknown leaves the label as it is), by which that
// node's agent selects the bindings it watches. Neither is ever removed here: a
// binding revoked from a node stays labelled with it, so its agent sees the
// revocation and detaches the cache.
func (r *BindingReconciler) ensureMeta(ctx context.Context, b *ssdv1.CacheBinding, node string) error {
	labelled := node == "" || b.Labels[ssdv1.LabelNode] == node
	if controllerutil.ContainsFinalizer(b, ssdv1.Finalizer) && labelled {
		return nil
	}
	before := b.DeepCopy()
	controllerutil.AddFinalizer(b, ssdv1.Finalizer)
	if !labelled {
		if b.Labels == nil {
			b.Labels = map[string]string{}
		}
		b.Labels[ssdv1.LabelNode] = node
	}
	return r.client.Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// reconcileDelete removes the finalizer when no node agent can do it: the binding
// was never admitted (there is no cache to detach), its Node object is gone, or
// the node's agent has not renewed its Lease for long. Otherwise the agent on
// status.nodeName detaches and removes it.
func (r *BindingReconciler) reconcileDelete(ctx context.Context, b *ssdv1.CacheBinding) error {
	if !controllerutil.ContainsFinalizer(b, ssdv1.Finalizer) {
		return nil
	}
	why, err := r.releaseReason(ctx, b)
	if err != nil || why == "" {
		return err
	}
	before := b.DeepCopy()
	controllerutil.RemoveFinalizer(b, ssdv1.Finalizer)
	if err := r.client.Patch(ctx, b, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		// NotFound: released already, and the cache had not caught up.
		return client.IgnoreNotFound(err)
	}
	klog.FromContext(ctx).Info("Removed finalizer", "binding", klog.KObj(b), "why", why)
	r.recorder.Eventf(b, nil, corev1.EventTypeWarning, "FinalizerRemoved", "Release", "%s", why)
	return nil
}

// releaseReason says why the controller may remove the finalizer, or "" when the
// node agent must do it.
func (r *BindingReconciler) releaseReason(ctx context.Context, b *ssdv1.CacheBinding) (string, error) {
	if b.Status.NodeName == "" {
		return "binding was not admitted to a node, so no cache needs detaching", nil
	}
	exists, err := nodeExists(ctx, r.client, b.Status.NodeName)
	if err != nil {
		return "", err
	}
	if !exists {
		return "node " + b.Status.NodeName + " no longer exists, so no node agent can detach the cache", nil
	}
	return r.agents.goneReason(ctx, b.Status.NodeName)
}

// asPending splits a resolution error into a user-facing pending reason and an API
// error to retry.
func asPending(err error) (*pendingError, error) {
	var p *pendingError
	if errors.As(err, &p) {
		return p, nil
	}
	return nil, err
}
