package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// unseenWrites holds the status this controller decided for each binding, from
// the decision (made holding the arbiter's locks) until the cache shows the
// write. Arbitration counts it beside the copy it reads, so the locks need not
// be held over the write's round trip, and a write the cache does not show yet
// (informer lag) still takes its room. A record is dropped when its write fails.
type unseenWrites struct {
	mu sync.RWMutex
	m  map[types.NamespacedName]unseenWrite
}

type unseenWrite struct {
	uid types.UID
	// before are the resourceVersions of the binding the write was decided on:
	// the cache's copy, and the copy the finalizer and label patch returned. The
	// write carries an optimistic lock on the latter, so every copy with another
	// version (read from the cache or the API server) includes it, without
	// comparing resourceVersions, which are opaque.
	before   []string
	nodeName string // "" when the decision was not to admit
	size     int64  // status.resolvedSizeBytes written
}

// record notes the status d gives b, read from the cache at readVersion.
func (u *unseenWrites) record(b *ssdv1.CacheBinding, readVersion string, d decision) {
	w := unseenWrite{uid: b.UID, before: []string{readVersion, b.ResourceVersion}, size: d.sizeBytes}
	if d.admit {
		w.nodeName = d.target.nodeName
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[types.NamespacedName]unseenWrite{}
	}
	u.m[types.NamespacedName{Namespace: b.Namespace, Name: b.Name}] = w
}

// forget drops the record of key and tells whether it admitted the binding,
// so that a failed write's admission, which kept room from others, wakes them.
func (u *unseenWrites) forget(key types.NamespacedName) (admitted bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	admitted = u.m[key].nodeName != ""
	delete(u.m, key)
	return admitted
}

// of returns the record of a write o does not include yet.
func (u *unseenWrites) of(o *ssdv1.CacheBinding) (unseenWrite, bool) {
	u.mu.RLock()
	defer u.mu.RUnlock()
	w, ok := u.m[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}]
	return w, ok && w.uid == o.UID && slices.Contains(w.before, o.ResourceVersion)
}

// behind tells whether b, read from the cache, predates a write of this
// controller that succeeded (a record outlives only writes that did). Once the
// cache shows the write, the record goes.
func (u *unseenWrites) behind(b *ssdv1.CacheBinding) bool {
	if _, ok := u.of(b); ok {
		return true
	}
	key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, key)
	return false
}
