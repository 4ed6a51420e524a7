package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// namespaceLimit returns a pending reason when admitting b with a cache of
// size bytes would take its namespace beyond one of the limits operators set
// on it: the bytes of cache admitted (annotation
// ssdv1.AnnotationNamespaceCacheLimit; a tenant cannot then reserve a node's
// whole cache with one small PVC) and, for a candidate, the number of bindings
// admitted (ssdv1.AnnotationNamespaceBindingLimit; a resize changes no count).
// A candidate (withPending) must also leave room for the namespace's older
// pending bindings, as on a node, so that whichever of two bindings is
// reconciled first, both agree on which one the limit leaves out.
func (r *BindingReconciler) namespaceLimit(ctx context.Context, b *ssdv1.CacheBinding, size int64, withPending bool) (*pendingError, error) {
	ns := &corev1.Namespace{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	for _, l := range namespaceLimits() {
		if l.count && !withPending {
			continue
		}
		raw, set := ns.Annotations[l.annotation]
		if !set {
			continue
		}
		limit, ok := l.parse(raw)
		if !ok {
			return pending(l.reason, "namespace %s has annotation %s=%q; want %s", b.Namespace, l.annotation, raw, l.want), nil
		}
		if p, err := r.confirmedFit(ctx, l, b, limit, size, withPending); p != nil || err != nil {
			return p, err
		}
	}
	return nil, nil
}

// confirmedFit checks b against one limit, first with the cache, which spares
// the API server the many checks that fail. A yes is then confirmed on the API
// server: the cache may not show this controller's latest admissions yet (a
// status patch's watch event arrives after the patch returned), and the older
// bindings' reservation does not cover a newer binding admitted before an older
// one could be (its PVC was bound later, or it reached the cache later). The
// reconciles of a limited namespace hold its lock alone (arbiter), so the API
// server holds every admission made there before this one.
func (r *BindingReconciler) confirmedFit(ctx context.Context, l namespaceLimitKind, b *ssdv1.CacheBinding, limit, size int64, withPending bool) (*pendingError, error) {
	for _, reader := range []client.Reader{r.client, r.reader} {
		p, err := r.namespaceFit(ctx, l, pool{reader: reader, namespace: b.Namespace, count: l.count}, b, limit, size, withPending)
		if p != nil || err != nil {
			return p, err
		}
	}
	return nil, nil
}

// namespaceLimitKind is one limit an operator may set on a namespace.
type namespaceLimitKind struct {
	annotation, reason string
	// count: the limit is on the number of bindings admitted, not their bytes.
	count bool
	// want says, for messages, what the annotation must hold.
	want string
}

func namespaceLimits() []namespaceLimitKind {
	return []namespaceLimitKind{
		{annotation: ssdv1.AnnotationNamespaceCacheLimit, reason: ssdv1.ReasonNamespaceCacheLimit,
			want: "a whole number of bytes such as 100Gi"},
		{annotation: ssdv1.AnnotationNamespaceBindingLimit, reason: ssdv1.ReasonNamespaceBindingLimit, count: true,
			want: "a whole number of bindings such as 50"},
	}
}

// parse reads the annotation's value: a quantity of bytes, or a count.
func (l namespaceLimitKind) parse(raw string) (int64, bool) {
	if l.count {
		n, err := strconv.ParseInt(raw, 10, 64)
		return n, err == nil && n >= 0
	}
	q, err := resource.ParseQuantity(raw)
	n, whole := q.AsInt64()
	return n, err == nil && whole && n >= 0
}

// limited tells whether the namespace has any limit set.
func limited(ns *corev1.Namespace) bool {
	for _, l := range namespaceLimits() {
		if _, set := ns.Annotations[l.annotation]; set {
			return true
		}
	}
	return false
}

// namespaceFit checks b against the namespace's limit with the bindings the
// pool's reader shows.
func (r *BindingReconciler) namespaceFit(ctx context.Context, l namespaceLimitKind, p pool, b *ssdv1.CacheBinding, limit, size int64, withPending bool) (*pendingError, error) {
	load, err := r.loadOf(ctx, b, p, limit, withPending)
	if err != nil {
		return nil, err
	}
	need := p.weight(size)
	ok, free := load.fits(claimOf(b, need))
	if ok {
		return nil, nil
	}
	used := max(load.admittedBytes, 0)
	var msg string
	if l.count {
		msg = fmt.Sprintf("namespace %s may have %d bindings admitted (annotation %s); %d are", b.Namespace, limit, l.annotation, used)
	} else {
		msg = fmt.Sprintf("namespace %s may use %d bytes of cache (annotation %s); its other bindings have %d", b.Namespace, limit, l.annotation, used)
	}
	// free is what the admitted bindings leave (none when they are over the limit),
	// less what the older pending ones take of it.
	if ahead := max(limit-used, 0) - free; ahead > 0 {
		msg += fmt.Sprintf(" and %d are kept for older pending ones", ahead)
	}
	if l.count {
		return pending(l.reason, "%s, so this one waits until one of them is deleted or the limit is raised", msg), nil
	}
	return pending(l.reason, "%s, this one needs %d", msg, size), nil
}
