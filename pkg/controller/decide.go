package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// decision is the controller's verdict for one binding.
type decision struct {
	admit     bool
	target    target
	sizeBytes int64 // resolved size to record; 0 when unknown
	// pending says what the binding waits for when admit is false.
	pending *pendingError
	// resizeBlocked is set when an admitted binding asked to grow beyond free capacity;
	// it keeps its old size and message says why.
	resizeBlocked string
	// sizeNote says that spec.size was capped at the volume's size; it is added to the
	// Pending condition's message whatever the verdict.
	sizeNote string
	// node is the node holding the binding's volume, "" while unknown: the
	// binding's ssdv1.LabelNode, whatever the verdict.
	node string
}

func admitted(t target, size int64) decision {
	return decision{admit: true, target: t, sizeBytes: size}
}

func waiting(p *pendingError, size int64) decision { return decision{pending: p, sizeBytes: size} }

// decide resolves the binding's volume, node and size and checks the node's capacity.
// Only API errors are returned as errors; everything a user can fix is a decision.
func (r *BindingReconciler) decide(ctx context.Context, b *ssdv1.CacheBinding) (decision, error) {
	if p, err := r.duplicateOf(ctx, b); p != nil || err != nil {
		return waiting(p, 0), err
	}
	t, err := resolveTarget(ctx, r.client, b)
	if err != nil {
		p, err := asPending(err)
		return waiting(p, 0), err
	}
	sz, err := sizeFor(b.Spec.Size, t.volumeBytes)
	if err != nil {
		return waiting(pending(ssdv1.ReasonInvalidSize, "spec.size: %v", err), 0), nil
	}
	var d decision
	if b.Status.NodeName == t.nodeName {
		d, err = r.decideAdmitted(ctx, b, t, sz.bytes)
	} else {
		d, err = r.decideCandidate(ctx, b, t, sz.bytes)
	}
	d.sizeNote, d.node = sz.note, t.nodeName
	return d, err
}

// sized is a binding's resolved cache size and, when it was capped, a note saying so.
type sized struct {
	bytes int64
	note  string
}

// sizeFor resolves spec.size for a volume of volumeBytes and caps it at the volume's
// size: a cache larger than the volume it fronts can hold nothing more, while the node
// would be charged the whole request, and spec.size may ask for up to 2^63-2 bytes.
// The cap is what 100% resolves to, so that a too-large quantity and "100%" give the
// same cache. With the volume's size unknown (0) nothing is capped; decideCandidate
// then still refuses a size above the node's whole capacity.
func sizeFor(spec string, volumeBytes int64) (sized, error) {
	s, err := ssdv1.ParseCacheSize(spec)
	if err != nil {
		return sized{}, err
	}
	b, capped, err := s.ResolveCapped(volumeBytes)
	if err != nil {
		return sized{}, fmt.Errorf("%q: %w", spec, err)
	}
	if !capped {
		return sized{bytes: b}, nil
	}
	return sized{bytes: b, note: fmt.Sprintf(
		"spec.size %q is more than the volume's %d bytes, so the cache is capped at %d bytes", spec, volumeBytes, b)}, nil
}

// decideAdmitted keeps an admitted binding where it is unless its node is gone; a
// node that stops reporting capacity does not evict caches that are attached.
func (r *BindingReconciler) decideAdmitted(ctx context.Context, b *ssdv1.CacheBinding, t target, size int64) (decision, error) {
	n, err := nodeCacheOf(ctx, r.client, t.nodeName, "")
	if err != nil {
		p, err := asPending(err)
		if p != nil && p.reason == ssdv1.ReasonNodeUnknown {
			return waiting(p, size), nil
		}
		return admitted(t, b.Status.ResolvedSizeBytes), err
	}
	if size == b.Status.ResolvedSizeBytes {
		return admitted(t, size), nil
	}
	load, err := r.loadOf(ctx, b, pool{reader: r.client, node: t.nodeName, cache: n}, n.capacity, false)
	if err != nil {
		return decision{}, err
	}
	if size > b.Status.ResolvedSizeBytes {
		if p, err := r.namespaceLimit(ctx, b, size, false); p != nil || err != nil {
			d := admitted(t, b.Status.ResolvedSizeBytes)
			if p != nil {
				d.resizeBlocked = fmt.Sprintf("cannot grow the cache to %d bytes: %s; keeping %d bytes", size, p.message, b.Status.ResolvedSizeBytes)
			}
			return d, err
		}
	}
	// The node agent removes the old LVs before it creates the new ones, so the new
	// cache must fit beside the others only. A smaller cache can take more than the
	// old one, where its blocks stop doubling and its metadata grows.
	old := n.charge(b.Status.ResolvedSizeBytes)
	if load.resizeFits(old, n.charge(size)) {
		return admitted(t, size), nil
	}
	verb := "grow"
	if size < b.Status.ResolvedSizeBytes {
		verb = "shrink"
	}
	d := admitted(t, b.Status.ResolvedSizeBytes)
	d.resizeBlocked = fmt.Sprintf("cannot %s the cache to %d bytes: it needs %d bytes%s, and node %s has %d of %d bytes free; keeping %d bytes",
		verb, size, n.charge(size), n.explain(size), t.nodeName, freeBytes(n.capacity, load.admittedBytes, old), n.capacity, b.Status.ResolvedSizeBytes)
	return d, nil
}

// decideCandidate admits a pending binding if it fits after the older pending ones,
// on its node and in its namespace.
func (r *BindingReconciler) decideCandidate(ctx context.Context, b *ssdv1.CacheBinding, t target, size int64) (decision, error) {
	n, err := nodeCacheOf(ctx, r.client, t.nodeName, b.Spec.DeviceClass)
	if err != nil {
		p, err := asPending(err)
		return waiting(p, size), err
	}
	need := n.charge(size)
	if need > n.capacity {
		// No amount of waiting admits it; say what would, rather than InsufficientCache's
		// usual "needs N bytes" that reads like a queue position.
		return waiting(pending(ssdv1.ReasonInsufficientCache,
			"spec.size %q needs %d bytes of cache%s, more than the %d bytes node %s has in all, so it can never be admitted there; "+
				"set spec.size to at most %d bytes (or a smaller percentage of the volume)",
			b.Spec.Size, need, n.explain(size), n.capacity, t.nodeName, n.largest()), size), nil
	}
	load, err := r.loadOf(ctx, b, pool{reader: r.client, node: t.nodeName, cache: n}, n.capacity, true)
	if err != nil {
		return decision{}, err
	}
	ok, free := load.fits(claimOf(b, need))
	if !ok {
		return waiting(pending(ssdv1.ReasonInsufficientCache,
			"needs %d bytes of cache%s on node %s, which has %d of %d bytes free for it",
			need, n.explain(size), t.nodeName, free, n.capacity), size), nil
	}
	if p, err := r.namespaceLimit(ctx, b, size, true); p != nil || err != nil {
		return waiting(p, size), err
	}
	return admitted(t, size), nil
}

func claimOf(b *ssdv1.CacheBinding, size int64) claim {
	return claim{namespace: b.Namespace, name: b.Name, created: b.CreationTimestamp.Time, sizeBytes: size}
}

// pool is what one arbitration shares out: the cache of node, or the limit of
// namespace. Exactly one is set; the other, "", counts bindings of any namespace
// (for a node) or on any node (for a namespace).
type pool struct {
	reader    client.Reader // the cache, or the API server itself for a confirmation
	node      string
	namespace string
	// cache is the node's pool, which charges each cache what LVM allocates for
	// it; zero for a namespace, whose limit counts the caches' sizes.
	cache nodeCache
	// count: each binding weighs 1, for a namespace's limit on admitted bindings.
	count bool
}

// weight is what a cache of size bytes takes of the pool.
func (p pool) weight(size int64) int64 {
	if p.count {
		return 1
	}
	return p.cache.charge(size)
}

// loadOf sums what other bindings take of a pool. With withPending it also collects
// the pending bindings older than b that would take from it.
func (r *BindingReconciler) loadOf(ctx context.Context, b *ssdv1.CacheBinding, p pool, capacity int64, withPending bool) (nodeLoad, error) {
	list := &ssdv1.CacheBindingList{}
	// Read-only: the cache's own objects, not a copy of every binding per reconcile.
	if err := p.reader.List(ctx, list, client.InNamespace(p.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nodeLoad{}, err
	}
	load := nodeLoad{capacity: capacity}
	self := claimOf(b, 0)
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == b.UID {
			continue
		}
		share, isAdmitted := r.shareOf(o, p)
		switch {
		case isAdmitted:
			// Deleting bindings still hold their cache until the agent detaches it. The
			// sum saturates: sizes admitted by an older controller may pass 2^63 together.
			load.admittedBytes, _ = addBytes(load.admittedBytes, share)
		case withPending && o.DeletionTimestamp.IsZero() && compareAge(claimOf(o, 0), self) < 0 && mayTarget(o, p.node):
			c, err := r.pendingClaim(ctx, o, p.node)
			if err != nil {
				return nodeLoad{}, err
			}
			if c != nil {
				c.sizeBytes = p.weight(c.sizeBytes)
				load.olderPending = append(load.olderPending, *c)
			}
		}
	}
	return load, nil
}

// shareOf is what the admitted binding o takes of pool p, and whether o is
// admitted at all: as the reader shows it or as a status write of this
// controller on its way says, whichever takes more, so that neither a write
// the reader does not show yet nor one that may still fail frees room early.
func (r *BindingReconciler) shareOf(o *ssdv1.CacheBinding, p pool) (int64, bool) {
	share := func(node string, size int64) int64 {
		if node == "" || (p.node != "" && node != p.node) {
			return 0
		}
		return p.weight(max(size, 0))
	}
	taken, isAdmitted := share(o.Status.NodeName, o.Status.ResolvedSizeBytes), o.Status.NodeName != ""
	if w, ok := r.unseen.of(o); ok {
		taken, isAdmitted = max(taken, share(w.nodeName, w.size)), isAdmitted || w.nodeName != ""
	}
	return taken, isAdmitted
}

// mayTarget tells whether the pending binding o may be for node ("" for any):
// its ssdv1.LabelNode names the node its last reconcile resolved, which spares
// resolving the volumes of every other node's pending bindings. Without the
// label (never reconciled since its volume was known) it may be for any node;
// pendingClaim resolves it.
func mayTarget(o *ssdv1.CacheBinding, node string) bool {
	l, set := o.Labels[ssdv1.LabelNode]
	return node == "" || !set || l == node
}

// pendingClaim returns the claim of a pending binding on nodeName ("" for any node),
// or nil when it waits for something other than capacity there (another node, its
// PVC, its size).
func (r *BindingReconciler) pendingClaim(ctx context.Context, o *ssdv1.CacheBinding, nodeName string) (*claim, error) {
	if p, err := r.duplicateOf(ctx, o); p != nil || err != nil {
		return nil, err
	}
	t, err := resolveTarget(ctx, r.client, o)
	if err != nil {
		_, err := asPending(err)
		return nil, err
	}
	if nodeName != "" && t.nodeName != nodeName {
		return nil, nil
	}
	// The same capped size its own decision uses, or the order would not be shared.
	sz, err := sizeFor(o.Spec.Size, t.volumeBytes)
	if err != nil {
		return nil, nil
	}
	if nodeName == "" {
		// For a namespace: a binding its node cannot take whatever the others do
		// keeps no share of the limit, or it would keep it for good.
		n, err := nodeCacheOf(ctx, r.client, t.nodeName, o.Spec.DeviceClass)
		if p, err := asPending(err); p != nil || err != nil || n.charge(sz.bytes) > n.capacity {
			return nil, err
		}
	}
	c := claimOf(o, sz.bytes)
	return &c, nil
}

// duplicateOf returns a pending reason when an older binding caches the same PVC: a
// volume has one cache, and the oldest binding wins. An older one being deleted
// keeps the volume until its agent has detached its cache and released it:
// admitted beside it, a newer binding's cache would be detached by that detach.
func (r *BindingReconciler) duplicateOf(ctx context.Context, b *ssdv1.CacheBinding) (*pendingError, error) {
	list := &ssdv1.CacheBindingList{}
	if err := r.client.List(ctx, list, client.InNamespace(b.Namespace), client.MatchingFields{indexPVCName: b.Spec.PVCName}); err != nil {
		return nil, err
	}
	self := claimOf(b, 0)
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == b.UID || compareAge(claimOf(o, 0), self) >= 0 {
			continue
		}
		if o.DeletionTimestamp.IsZero() {
			return pending(ssdv1.ReasonDuplicateBinding, "PVC %s already has a cache from the older binding %s", b.Spec.PVCName, o.Name), nil
		}
		if o.Status.NodeName != "" {
			return pending(ssdv1.ReasonDuplicateBinding, "the older binding %s of PVC %s is being deleted; this one is admitted once the node agent has detached its cache",
				o.Name, b.Spec.PVCName), nil
		}
	}
	return nil, nil
}
