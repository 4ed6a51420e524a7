package controller

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// The node of a pool world reports its cache pool as a current agent does: 1 GiB
// of 4 MiB extents, caches of 256 KiB blocks, and beside them the older capacity
// annotation (the pool less 2 %) that an older controller admits against.
const (
	mi           = 1 << 20
	testPool     = 1 << 30
	testExtent   = 4 * mi
	testBlock    = 256 << 10
	testCapacity = testPool / 100 * 98
)

func newPoolWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, testCapacity)
	w.annotateNode(map[string]string{
		ssdv1.AnnotationCachePoolBytes:   strconv.Itoa(testPool),
		ssdv1.AnnotationCacheExtentBytes: strconv.Itoa(testExtent),
		ssdv1.AnnotationCacheBlockBytes:  strconv.Itoa(testBlock),
	})
	return w
}

// annotateNode sets (or, for "-", removes) annotations of testNode.
func (w *world) annotateNode(a map[string]string) {
	w.t.Helper()
	node := &corev1.Node{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: testNode}, node); err != nil {
		w.t.Fatal(err)
	}
	for k, v := range a {
		if v == "-" {
			delete(node.Annotations, k)
		} else {
			node.Annotations[k] = v
		}
	}
	if err := w.c.Update(w.ctx, node); err != nil {
		w.t.Fatal(err)
	}
}

// checkWithinPool fails when the LVs of the caches admitted to testNode take more
// than its pool, and returns how many caches it holds.
func (w *world) checkWithinPool() int {
	w.t.Helper()
	list := &ssdv1.CacheBindingList{}
	if err := w.c.List(w.ctx, list); err != nil {
		w.t.Fatal(err)
	}
	var sum uint64
	n := 0
	for _, b := range list.Items {
		if b.Status.NodeName == testNode {
			sum += cachesize.Footprint(uint64(b.Status.ResolvedSizeBytes), testExtent, testBlock/cachesize.SectorSize)
			n++
		}
	}
	if sum > testPool {
		w.t.Errorf("the %d caches admitted to %s take %d bytes of its pool (data and metadata LVs in whole extents), more than its %d",
			n, testNode, sum, testPool)
	}
	return n
}

// smallBindings adds count bindings of 16Mi caches, one a second, on 1Gi volumes.
func (w *world) smallBindings(count int) []string {
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("b%02d", i)
		w.volume(names[i], "1Gi")
		w.binding(names[i], "16Mi", i, nil)
	}
	return names
}

// The overcommit: a 16Mi cache takes 32 MiB of the pool (its metadata LV is
// 4 MiB and 2,816 bytes, two extents, and a promotion writes a second one beside
// it), so 1 GiB holds 32 of them. Charged their 16 MiB against the capacity the
// node reported, all 60 were admitted, 1,440 MiB of LVs once attached for a
// 1,024 MiB pool, and the last 18 failed at lvcreate on the node.
// Reconciled youngest first, the older pending bindings are charged the same.
func TestSmallCachesDoNotOvercommitThePool(t *testing.T) {
	w := newPoolWorld(t)
	names := w.smallBindings(60)
	for i := len(names) - 1; i >= 0; i-- {
		w.reconcile(names[i])
	}
	for i, name := range names {
		if i < 32 {
			w.wantAdmitted(name, 16*mi)
		} else {
			w.wantPending(name, ssdv1.ReasonInsufficientCache,
				"needs 33554432 bytes of cache (16777216 bytes of data and two metadata LVs, one for promotions, in whole extents of 4194304 bytes)",
				"which has 0 of 1073741824 bytes free")
		}
	}
	if n := w.checkWithinPool(); n != 32 {
		t.Errorf("%d caches admitted, want the 32 that fit", n)
	}
}

// A node whose agent predates the pool annotations keeps today's admission: a
// cache is charged its size against the capacity it reports.
func TestOlderAgentIsChargedTheSize(t *testing.T) {
	w := newWorld(t, testCapacity)
	for _, name := range w.smallBindings(60) {
		w.wantAdmitted(name, 16*mi)
	}
	w.checkWithinCapacity(testCapacity)
}

// A resize is charged like an admission: the grown cache's LVs must fit beside the
// others', whose metadata LVs count too. 20 caches of 16Mi take 640 MiB; the 21st
// can grow to 368Mi (384 MiB with its two metadata LVs: the pool is full) and not to
// 372Mi, which the sizes alone (692 MiB of 1,003) let through.
func TestResizeIsChargedTheFootprint(t *testing.T) {
	w := newPoolWorld(t)
	names := w.smallBindings(21)
	for _, name := range names {
		w.wantAdmitted(name, 16*mi)
	}
	last := names[len(names)-1]
	w.setSize(last, "372Mi")
	b := w.wantAdmitted(last, 16*mi)
	for _, part := range []string{"cannot grow the cache to 390070272 bytes: it needs 406847488 bytes",
		"node n1 has 369098752 of 1073741824 bytes free"} {
		if msg := pendingMessage(b); !strings.Contains(msg, part) {
			t.Errorf("grown past the pool: message %q does not say %q", msg, part)
		}
	}
	w.setSize(last, "368Mi")
	w.wantAdmitted(last, 368*mi)
	w.checkWithinPool()
}

// A cache that no empty node could take is told the largest one that it could:
// the pool less the two metadata LVs of that cache, in whole extents.
func TestNeverFitsNamesTheLargestCacheThePoolTakes(t *testing.T) {
	w := newPoolWorld(t)
	w.volume("big", "2Gi")
	w.binding("big", "1Gi", 0, nil)
	w.wantPending("big", ssdv1.ReasonInsufficientCache, "needs 1090519040 bytes of cache (1073741824 bytes of data",
		"can never be admitted", "at most 1056964608 bytes")
	w.setSize("big", "1056964608")
	w.wantAdmitted("big", 1056964608)
	w.checkWithinPool()
}

// The namespace limit is a tenant's quota on the cache sizes it asks for: it counts
// what the bindings resolve to, not the metadata LVs and extents of the nodes their
// volumes landed on (the nodes' pools are kept from overcommit by their own charge).
// 4 caches of 16Mi fill a 64Mi limit, although their LVs take 128 MiB.
func TestNamespaceLimitCountsTheCacheSizes(t *testing.T) {
	w := newPoolWorld(t)
	w.limitNamespace("64Mi")
	names := w.smallBindings(5)
	for _, name := range names[:4] {
		w.wantAdmitted(name, 16*mi)
	}
	w.wantPending(names[4], ssdv1.ReasonNamespaceCacheLimit, "its other bindings have 67108864, this one needs 16777216")
}

// A node that reports its pool without a usable extent or block size is not
// admitted against on a guess.
func TestBrokenPoolReportIsCapacityUnknown(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		{ssdv1.AnnotationCacheExtentBytes, "-", "has not reported its cache capacity (annotation " + ssdv1.AnnotationCacheExtentBytes},
		{ssdv1.AnnotationCacheExtentBytes, "4M", ssdv1.AnnotationCacheExtentBytes + `="4M"; want a whole number of bytes`},
		{ssdv1.AnnotationCachePoolBytes, "-1", ssdv1.AnnotationCachePoolBytes + `="-1"; want a whole number of bytes`},
		{ssdv1.AnnotationCacheBlockBytes, "-", "annotation " + ssdv1.AnnotationCacheBlockBytes},
		{ssdv1.AnnotationCacheBlockBytes, "0", ssdv1.AnnotationCacheBlockBytes + `="0"; want a dm-cache block size`},
		{ssdv1.AnnotationCacheBlockBytes, "48000", ssdv1.AnnotationCacheBlockBytes + `="48000"; want a dm-cache block size`},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			w := newPoolWorld(t)
			w.annotateNode(map[string]string{c.name: c.value})
			w.volume("v", "1Gi")
			w.binding("v", "16Mi", 0, nil)
			w.wantPending("v", ssdv1.ReasonCacheCapacityUnknown, c.want)
		})
	}
}

// A change of any annotation admission reads wakes the pending bindings.
func TestNodeCapacityChangedSeesThePoolAnnotations(t *testing.T) {
	p := nodeCapacityChanged()
	for _, a := range []string{ssdv1.AnnotationCachePoolBytes, ssdv1.AnnotationCacheExtentBytes, ssdv1.AnnotationCacheBlockBytes,
		ssdv1.AnnotationCacheCapacityBytes, ssdv1.AnnotationDeviceClass, ssdv1.AnnotationDeviceClassDeprecated} {
		old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{a: "1"}}}
		changed := old.DeepCopy()
		changed.Annotations[a] = "2"
		if !p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: changed}) {
			t.Errorf("a change of %s does not wake the bindings", a)
		}
	}
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{ssdv1.AnnotationCacheFreeBytes: "1"}}}
	changed := old.DeepCopy()
	changed.Annotations[ssdv1.AnnotationCacheFreeBytes] = "2"
	if p.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: changed}) {
		t.Error("a change of the free bytes, which admission does not read, wakes the bindings")
	}
}
