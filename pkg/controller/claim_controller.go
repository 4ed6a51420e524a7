package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// ClaimReconciler creates a CacheBinding for every bound PVC whose StorageClass has
// ssdcache.io/cache-mode: ReadCache. The binding is named after the PVC and owned by
// it, so the garbage collector deletes it with the PVC (and its finalizer then makes
// the deletion wait for the detach).
type ClaimReconciler struct {
	client   client.Client
	scheme   *runtime.Scheme
	recorder events.EventRecorder
}

// NewClaimReconciler returns the auto-binding reconciler.
func NewClaimReconciler(c client.Client, scheme *runtime.Scheme, recorder events.EventRecorder) *ClaimReconciler {
	return &ClaimReconciler{client: c, scheme: scheme, recorder: recorder}
}

// SetupWithManager wakes the reconciler for PVC changes, for changes of their
// StorageClass, and when an auto-created binding is deleted (it is recreated: the
// class promises a cache to each of its volumes; use mode Paused to bypass one).
func (r *ClaimReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("pvc-autobinding").
		For(&corev1.PersistentVolumeClaim{}).
		Owns(&ssdv1.CacheBinding{}).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfClass)).
		Complete(r)
}

// Reconcile creates the binding a bound PVC of a caching class should have.
func (r *ClaimReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pvc.DeletionTimestamp.IsZero() || pvc.Status.Phase != corev1.ClaimBound {
		return ctrl.Result{}, nil
	}
	sc, err := r.storageClassOf(ctx, pvc)
	if sc == nil || err != nil {
		return ctrl.Result{}, err
	}
	spec, err := bindingSpecFromClass(pvc.Name, sc)
	if err != nil {
		r.recorder.Eventf(pvc, sc, corev1.EventTypeWarning, "InvalidCacheParameters", "CreateCacheBinding", "%v", err)
		return ctrl.Result{}, nil // nothing to retry until the class changes
	}
	if spec == nil {
		return ctrl.Result{}, nil
	}
	if has, err := r.hasBinding(ctx, pvc); has || err != nil {
		return ctrl.Result{}, err
	}
	// Once per claim, as its binding is created: the class still works. One
	// Event for all: the recorder folds Events of one reason into a series.
	if notes := ssdv1.DeprecatedSpellings(sc.Parameters); notes != nil {
		r.recorder.Eventf(pvc, sc, corev1.EventTypeWarning, "DeprecatedCacheParameters", "CreateCacheBinding",
			"StorageClass %s: %s", sc.Name, strings.Join(notes, "; "))
	}
	return ctrl.Result{}, r.createBinding(ctx, pvc, sc, *spec)
}

func (r *ClaimReconciler) storageClassOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*storagev1.StorageClass, error) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil, nil
	}
	sc := &storagev1.StorageClass{}
	err := r.client.Get(ctx, types.NamespacedName{Name: *pvc.Spec.StorageClassName}, sc)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// hasBinding tells whether any binding (auto-created or the user's) caches the PVC.
func (r *ClaimReconciler) hasBinding(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	list := &ssdv1.CacheBindingList{}
	err := r.client.List(ctx, list, client.InNamespace(pvc.Namespace), client.MatchingFields{indexPVCName: pvc.Name})
	return len(list.Items) > 0, err
}

func (r *ClaimReconciler) createBinding(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, spec ssdv1.CacheBindingSpec) error {
	b := &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{
			Name: pvc.Name, Namespace: pvc.Namespace,
			Labels: map[string]string{ssdv1.LabelManagedBy: ssdv1.ManagedByController},
		},
		Spec: spec,
	}
	// No blockOwnerDeletion: the PVC need not wait for the binding, and it would need
	// RBAC on persistentvolumeclaims/finalizers.
	if err := controllerutil.SetControllerReference(pvc, b, r.scheme, controllerutil.WithBlockOwnerDeletion(false)); err != nil {
		return err
	}
	err := r.client.Create(ctx, b)
	if apierrors.IsAlreadyExists(err) {
		return r.checkNameTaken(ctx, pvc)
	}
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Created CacheBinding", "binding", klog.KObj(b), "storageClass", sc.Name, "size", spec.Size)
	r.recorder.Eventf(pvc, b, corev1.EventTypeNormal, "CacheBindingCreated", "CreateCacheBinding",
		"created CacheBinding %s (size %s) as StorageClass %s asks", b.Name, spec.Size, sc.Name)
	return nil
}

// checkNameTaken reports a binding of the PVC's name that caches another PVC; one
// for this PVC means a stale cache did not show it yet, which is fine.
func (r *ClaimReconciler) checkNameTaken(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	existing := &ssdv1.CacheBinding{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(pvc), existing); err != nil {
		return client.IgnoreNotFound(err)
	}
	if existing.Spec.PVCName != pvc.Name {
		r.recorder.Eventf(pvc, existing, corev1.EventTypeWarning, "CacheBindingNameTaken", "CreateCacheBinding",
			"cannot create CacheBinding %s: that name caches PVC %s; create a binding for this PVC by hand",
			pvc.Name, existing.Spec.PVCName)
	}
	return nil
}

// claimsOfClass wakes the PVCs of a StorageClass that changed.
func (r *ClaimReconciler) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	list := &corev1.PersistentVolumeClaimList{}
	if err := r.client.List(ctx, list, client.MatchingFields{indexClaimStorageClass: o.GetName()}); err != nil {
		klog.FromContext(ctx).Error(err, "Listing PVCs of StorageClass failed", "storageClass", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
	}
	return reqs
}

// bindingSpecFromClass returns the binding a PVC of this class should get, nil when
// the class does not ask for a cache, or an error naming the bad parameter. It
// reads the class with the same parser as CreateVolume.
func bindingSpecFromClass(pvcName string, sc *storagev1.StorageClass) (*ssdv1.CacheBindingSpec, error) {
	if sc.Provisioner != ssdv1.DriverName {
		return nil, nil
	}
	params, err := ssdv1.ParseCacheParameters(sc.Parameters)
	if err != nil {
		return nil, fmt.Errorf("StorageClass %s: %w", sc.Name, err)
	}
	return params.BindingSpec(pvcName), nil
}
