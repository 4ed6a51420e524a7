package controller

import (
	"fmt"
	"math"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// nodeCache is a node's cache pool as its agent reported it, and what admission
// charges a cache against it.
type nodeCache struct {
	// capacity is what the caches admitted to the node may take in all.
	capacity int64
	// extentBytes and blockSectors (the pool's extent size and the block size of
	// new caches) make a cache's charge what lvcreate allocates for it. A node
	// whose agent predates them has blockSectors 0: a cache is charged its size
	// there, against a capacity that keeps a reserve for metadata instead.
	extentBytes, blockSectors uint64
}

// charge is what a cache of size bytes takes of the node's capacity: its data
// and metadata LVs in whole extents, and the second metadata LV a promotion
// writes beside the live one. Charged its size alone, a node filled with
// small caches was overcommitted (a 16 MiB cache takes 32 MiB of 4 MiB
// extents), and the later ones failed at lvcreate on the node. The zero nodeCache charges
// the size, which is also what a namespace's limit counts.
func (n nodeCache) charge(size int64) int64 {
	if n.blockSectors == 0 || size <= 0 {
		return size
	}
	return int64(min(cachesize.Footprint(uint64(size), n.extentBytes, n.blockSectors), math.MaxInt64))
}

// largest is the largest cache the node could take were it empty.
func (n nodeCache) largest() int64 {
	if n.blockSectors == 0 {
		return n.capacity
	}
	return int64(cachesize.MaxDataBytes(uint64(max(n.capacity, 0)), n.extentBytes, n.blockSectors))
}

// explain says, for messages, how a cache of size bytes comes to take charge(size).
func (n nodeCache) explain(size int64) string {
	if n.blockSectors == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d bytes of data and two metadata LVs, one for promotions, in whole extents of %d bytes)", size, n.extentBytes)
}

// parseNodeCache reads the cache pool annotations of node; a node without
// AnnotationCachePoolBytes is read as its older agent reported it.
func parseNodeCache(node *corev1.Node) (nodeCache, error) {
	if _, ok := node.Annotations[ssdv1.AnnotationCachePoolBytes]; !ok {
		capacity, err := bytesAnnotation(node, ssdv1.AnnotationCacheCapacityBytes)
		return nodeCache{capacity: capacity}, err
	}
	var pool, extent, block int64
	for _, a := range []struct {
		name string
		into *int64
	}{
		{ssdv1.AnnotationCachePoolBytes, &pool}, {ssdv1.AnnotationCacheExtentBytes, &extent}, {ssdv1.AnnotationCacheBlockBytes, &block},
	} {
		v, err := bytesAnnotation(node, a.name)
		if err != nil {
			return nodeCache{}, err
		}
		*a.into = v
	}
	// Not an older agent but a broken report: with no valid block size the
	// metadata of a cache cannot be sized.
	if block%cachesize.SectorSize != 0 || cachesize.ValidateBlockSectors(uint64(block)/cachesize.SectorSize) != nil {
		return nodeCache{}, pending(ssdv1.ReasonCacheCapacityUnknown,
			"node %s has annotation %s=%q; want a dm-cache block size in bytes (a multiple of 32Ki up to 1Gi)",
			node.Name, ssdv1.AnnotationCacheBlockBytes, node.Annotations[ssdv1.AnnotationCacheBlockBytes])
	}
	return nodeCache{capacity: pool, extentBytes: uint64(extent), blockSectors: uint64(block) / cachesize.SectorSize}, nil
}

// bytesAnnotation reads a byte count the node agent reported on node.
func bytesAnnotation(node *corev1.Node, name string) (int64, error) {
	raw, ok := node.Annotations[name]
	if !ok {
		return 0, pending(ssdv1.ReasonCacheCapacityUnknown,
			"node %s has not reported its cache capacity (annotation %s); is the ssdcache node agent running there?",
			node.Name, name)
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 {
		return 0, pending(ssdv1.ReasonCacheCapacityUnknown,
			"node %s has annotation %s=%q; want a whole number of bytes", node.Name, name, raw)
	}
	return n, nil
}
