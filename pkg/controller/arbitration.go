package controller

import (
	"cmp"
	"slices"
	"time"
)

// claim is one binding's demand on a node's cache capacity.
type claim struct {
	namespace, name string
	created         time.Time
	sizeBytes       int64 // what it takes of the pool (pool.cache.charge of its size)
}

// compareAge orders claims by age, then by namespace and name so that the order is
// total even for bindings created within the same second.
func compareAge(a, b claim) int {
	return cmp.Or(a.created.Compare(b.created), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
}

// nodeLoad is what competes for one node's cache, or for one namespace's limit,
// which is shared out the same way: bindings already admitted keep their place;
// pending ones are admitted oldest first.
type nodeLoad struct {
	capacity      int64
	admittedBytes int64   // sum of what the admitted bindings take, the candidate excluded
	olderPending  []claim // pending bindings for the node older than the candidate
}

// fits decides whether a pending candidate can be admitted. The pending bindings older
// than it are placed first, greedily in age order, each taking room if it fits; so the
// outcome for every binding is the same whichever order they are reconciled in, and a
// stale cache that does not show an older binding's admission yet changes nothing.
// It returns the bytes still free for the candidate.
func (l nodeLoad) fits(candidate claim) (bool, int64) {
	// capacity and admittedBytes are both in [0, MaxInt64] (loadOf saturates the sum),
	// so this cannot wrap; it is negative on an overcommitted node.
	free := max(l.capacity, 0) - max(l.admittedBytes, 0)
	older := slices.Clone(l.olderPending)
	slices.SortFunc(older, compareAge)
	for _, c := range older {
		// A claim that is not positive cannot be a real cache and must not add room.
		if c.sizeBytes > 0 && c.sizeBytes <= free {
			free -= c.sizeBytes
		}
	}
	return candidate.sizeBytes > 0 && candidate.sizeBytes <= free, max(free, 0)
}

// resizeFits decides whether an admitted binding may grow or shrink to newBytes.
// Shrinking always fits; growing must fit beside the other admitted bindings. The sum
// is checked: a wrapped one would let a cache of nearly 2^63 bytes in.
func (l nodeLoad) resizeFits(oldBytes, newBytes int64) bool {
	if newBytes <= oldBytes {
		return true
	}
	total, ok := addBytes(max(l.admittedBytes, 0), newBytes)
	return ok && total <= l.capacity
}
