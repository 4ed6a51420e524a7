package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// namespaceLimit returns a pending reason when giving b a cache of size bytes
// would take the bytes admitted in its namespace beyond the namespace's
// limit (annotation ssdv1.AnnotationNamespaceCacheLimit, set by operators; a
// tenant cannot then reserve a node's whole cache with one small PVC). A
// candidate (withPending) must also leave room for the namespace's older pending
// bindings, as on a node, so that whichever of two bindings is reconciled first,
// both agree on which one the limit leaves out.
func (r *BindingReconciler) namespaceLimit(ctx context.Context, b *ssdv1.CacheBinding, size int64, withPending bool) (*pendingError, error) {
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
	// The cache answers first, which spares the API server the many checks that
	// fail. A yes is then confirmed on the API server: the cache may not show this
	// controller's latest admissions yet (a status patch's watch event arrives
	// after the patch returned), and the older bindings' reservation does not
	// cover a newer binding admitted before an older one could be (its PVC was
	// bound later, or it reached the cache later). Reconciles run one at a time
	// (SetupWithManager), so the API server holds every admission made before this one.
	for _, reader := range []client.Reader{r.client, r.reader} {
		p, err := r.namespaceFit(ctx, pool{reader: reader, namespace: b.Namespace}, b, limit, size, withPending)
		if p != nil || err != nil {
			return p, err
		}
	}
	return nil, nil
}

// namespaceFit checks b's size against the namespace's limit with the bindings
// the pool's reader shows.
func (r *BindingReconciler) namespaceFit(ctx context.Context, p pool, b *ssdv1.CacheBinding, limit, size int64, withPending bool) (*pendingError, error) {
	load, err := r.loadOf(ctx, b, p, limit, withPending)
	if err != nil {
		return nil, err
	}
	ok, free := load.fits(claimOf(b, size))
	if ok {
		return nil, nil
	}
	used := max(load.admittedBytes, 0)
	msg := fmt.Sprintf("namespace %s may use %d bytes of cache (annotation %s); its other bindings have %d",
		b.Namespace, limit, ssdv1.AnnotationNamespaceCacheLimit, used)
	// free is what the admitted bindings leave (none when they are over the limit),
	// less what the older pending ones take of it.
	if ahead := max(limit-used, 0) - free; ahead > 0 {
		msg += fmt.Sprintf(" and %d are kept for older pending ones", ahead)
	}
	return pending(ssdv1.ReasonNamespaceCacheLimit, "%s, this one needs %d", msg, size), nil
}
