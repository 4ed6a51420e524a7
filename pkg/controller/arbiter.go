package controller

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// DefaultWorkers is how many bindings the controller reconciles at once.
// Admission decisions that share a node or a limited namespace still run one
// at a time (arbiter), but not their writes; the others run side by side, so
// that a burst of one tenant's bindings on a few nodes does not queue every
// other admission behind it. A reconcile spends its time waiting for its two
// writes (the finalizer and label, then the status), not on CPU. make
// bench-api's 1,000 bindings on this 2-core machine, loaded by other jobs:
// p99 5.5 s with 32 workers, 1.8 to 3.2 s with 64, no better with 96 or 128,
// which crowd the API server.
const DefaultWorkers = 64

// arbiter serialises the admission decisions that compete for the same pool:
// one node's cache, or the limit of one namespace. A reconcile holds its
// namespace's lock, shared unless the namespace has a limit, then its node's
// lock, always in that order, so two reconciles never wait for each other in
// a cycle. The locks cover the decision only, not its status write: the
// decision is recorded (unseenWrites) before they are released, and every
// later decision on that node or in that namespace counts it, while the write
// is on its way and until the cache shows it. So a burst on a few nodes costs
// the others no worker waiting out its writes' round trips.
type arbiter struct {
	namespaces, nodes keyedLocks
}

// decideHeld decides b's admission holding the locks of its namespace and of
// node, the node its volume was found on, and records the status the decision
// gives it. It does not admit (false) when the volume is on another node now.
// readVersion is the resourceVersion b was read from the cache with.
func (r *BindingReconciler) decideHeld(ctx context.Context, b *ssdv1.CacheBinding, node, readVersion string) (decision, bool, error) {
	release, err := r.arbiter.hold(ctx, r.client, b, node)
	if err != nil {
		return decision{}, false, err
	}
	defer release()
	d, err := r.decide(ctx, b)
	if err != nil || (d.admit && d.node != node) {
		return d, false, err
	}
	r.unseen.record(b, readVersion, d)
	return d, true, nil
}

// hold takes the locks for deciding b, whose volume the caller found on node
// ("" when unknown: no admission can follow, decide finds no node either
// unless the volume was bound meanwhile, which the caller checks). It returns
// the function that releases them.
func (a *arbiter) hold(ctx context.Context, c client.Reader, b *ssdv1.CacheBinding, node string) (func(), error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: b.Namespace}, ns); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	releaseNS := a.namespaces.lock(b.Namespace, !limited(ns))
	if node == "" {
		return releaseNS, nil
	}
	releaseNode := a.nodes.lock(node, false)
	return func() { releaseNode(); releaseNS() }, nil
}

// keyedLocks hands out one RWMutex per key, forgotten once nobody holds or
// waits for it, so the map does not grow with every namespace and node seen.
type keyedLocks struct {
	mu sync.Mutex
	m  map[string]*keyedLock
}

type keyedLock struct {
	sync.RWMutex
	refs int
}

// lock takes key's lock, shared or exclusive, and returns its release.
func (k *keyedLocks) lock(key string, shared bool) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyedLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	if shared {
		l.RLock()
	} else {
		l.Lock()
	}
	return func() {
		if shared {
			l.RUnlock()
		} else {
			l.Unlock()
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
	}
}
