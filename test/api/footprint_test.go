package api

import (
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestAdmissionChargesThePoolFootprint: a node that reports its cache pool is
// charged, for each cache, what LVM allocates: its data LV, its metadata LV and the
// second metadata LV a promotion writes, in whole extents. A 128 MiB pool of 4 MiB
// extents holds four 16Mi caches (32 MiB each), not the five that their sizes
// against the older capacity annotation (the pool less 2 %) let in; a pool
// reported larger admits the fifth.
func TestAdmissionChargesThePoolFootprint(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	const pool = 128 << 20
	node := createNode(t, ctx, c, strconv.Itoa(pool/100*98))
	for k, v := range map[string]string{
		ssdv1.AnnotationCachePoolBytes:   strconv.Itoa(pool),
		ssdv1.AnnotationCacheExtentBytes: strconv.Itoa(4 << 20),
		ssdv1.AnnotationCacheBlockBytes:  strconv.Itoa(256 << 10),
	} {
		setAnnotation(t, ctx, c, &corev1.Node{}, node, k, v)
	}
	// Created within the same second, these are ordered by name: b0 first.
	for i := range 5 {
		name := fmt.Sprintf("b%d", i)
		createVolume(t, ctx, c, ns, volume{pvc: name, node: node, size: "1Gi"})
		createBinding(t, ctx, c, ns, name, name, "16Mi")
	}
	for i := range 4 {
		waitAdmitted(t, c, ns, fmt.Sprintf("b%d", i), node, 16<<20)
	}
	waitPending(t, c, ns, "b4", ssdv1.ReasonInsufficientCache, fmt.Sprintf(
		"needs 33554432 bytes of cache (16777216 bytes of data and two metadata LVs, one for promotions, in whole extents of 4194304 bytes) on node %s, "+
			"which has 0 of 134217728 bytes free", node))

	setAnnotation(t, ctx, c, &corev1.Node{}, node, ssdv1.AnnotationCachePoolBytes, strconv.Itoa(pool+32<<20))
	waitAdmitted(t, c, ns, "b4", node, 16<<20)
}
