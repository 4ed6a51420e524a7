package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// namespaceLimit returns a pending reason when giving b a cache of size bytes
// would take the bytes admitted in its namespace beyond the namespace's
// limit (annotation ssdv1.AnnotationNamespaceCacheLimit, set by operators; a
// tenant cannot then reserve a node's whole cache with one small PVC).
func (r *BindingReconciler) namespaceLimit(ctx context.Context, b *ssdv1.CacheBinding, size int64) (*pendingError, error) {
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	raw, set := ns.Annotations[ssdv1.AnnotationNamespaceCacheLimit]
	if !set {
		return nil, nil
	}
	q, err := resource.ParseQuantity(raw)
	limit, whole := q.AsInt64()
	if err != nil || !whole || limit < 0 {
		return pending(ssdv1.ReasonNamespaceCacheLimit, "namespace %s has annotation %s=%q; want a whole number of bytes such as 100Gi",
			b.Namespace, ssdv1.AnnotationNamespaceCacheLimit, raw), nil
	}
	used, err := r.admittedInNamespace(ctx, b)
	if err != nil {
		return nil, err
	}
	if total, ok := addBytes(used, size); ok && total <= limit {
		return nil, nil
	}
	return pending(ssdv1.ReasonNamespaceCacheLimit,
		"namespace %s may use %d bytes of cache (annotation %s); its other bindings have %d, this one needs %d",
		b.Namespace, limit, ssdv1.AnnotationNamespaceCacheLimit, used, size), nil
}

// admittedInNamespace sums the cache bytes of the other admitted bindings of b's namespace.
func (r *BindingReconciler) admittedInNamespace(ctx context.Context, b *ssdv1.CacheBinding) (int64, error) {
	list := &ssdv1.CacheBindingList{}
	if err := r.client.List(ctx, list, client.InNamespace(b.Namespace)); err != nil {
		return 0, err
	}
	var used int64
	for _, o := range list.Items {
		if o.UID != b.UID && o.Status.NodeName != "" {
			used, _ = addBytes(used, max(o.Status.ResolvedSizeBytes, 0))
		}
	}
	return used, nil
}
