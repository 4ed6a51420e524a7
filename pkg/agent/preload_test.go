package agent

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
)

// volumeFiles stands for the filesystem of the volume's device: one file of
// two 64 KiB cache blocks, unless unmounted.
type volumeFiles struct {
	unmounted bool
	calls     int
	length    uint64 // of model.bin, 2 blocks if 0
}

func (f *volumeFiles) Map(_ context.Context, _ dm.DevNum, paths []string, visit fileblocks.Visitor) (fileblocks.Found, error) {
	f.calls++
	if f.unmounted {
		return fileblocks.Found{}, fileblocks.ErrNotMounted
	}
	var found fileblocks.Found
	for _, p := range paths {
		if p != "model.bin" {
			found.Missing = append(found.Missing, p)
			continue
		}
		found.Files++
		x := fileblocks.Extent{Offset: 10 << 16, Length: cmp.Or(f.length, 2<<16)}
		found.Bytes += x.Length
		found.Truncated = !visit(x)
	}
	return found, nil
}

// attachedForPreload is a node whose binding's cache was attached by a
// first visit (its metadata as the kernel leaves it), and the binding then
// asks for paths: generation 2.
func attachedForPreload(t *testing.T, files *volumeFiles, paths ...string) (*fakeNode, *BindingReconciler, client.Client, *events.FakeRecorder) {
	t.Helper()
	n := newNode(t, func(l *cache.Layers) { l.Files = files })
	n.dev.Add(cache.DevicePath(vol), blockdevfake.Device{Node: "/dev/dm-3", DevNum: dm.DevNum{Major: 253, Minor: 3}})
	n.stage(t, nil)
	r, c, rec := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	n.meta.Put("/dev/nvme/"+vol+".cache-meta", dm.CacheMetadata{BlockSectors: 128, CacheBlocks: gib / (128 * 512), Policy: "smq"})
	n.dm.StatusOverride[cache.DeviceName(vol)] = status(0, 0, 0, "rw -") // 16384 blocks: the walk stops at the cache's size
	b := get(t, c)
	b.Spec.PreloadPaths, b.Generation = paths, 2
	if err := c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if files.calls != 0 || !strings.Contains(drain(rec), "CacheAttached") {
		t.Fatal("the first visit preloaded, or attached nothing")
	}
	return n, r, c, rec
}

// eventList is what rec recorded since the last look, in order.
func eventList(rec *events.FakeRecorder) []string {
	if got := strings.TrimSpace(drain(rec)); got != "" {
		return strings.Split(got, "\n")
	}
	return nil
}

func TestPreloadPathsCopiedOncePerSpecChange(t *testing.T) {
	files := &volumeFiles{}
	n, r, c, rec := attachedForPreload(t, files, "model.bin", "logs/gone")
	reconcileOnce(t, r)
	if got := testutil.ToFloat64(n.metrics.preloaded.With(n.metrics.labels(vol))); got != 2 {
		t.Errorf("preloaded blocks metric %v, want 2", got)
	}
	p := get(t, c).Status.LastPreload
	if p == nil || p.ObservedGeneration != 2 || p.Files != 1 || p.FileBytes != 2<<16 || p.Bytes != 2<<16 || p.Error != "" ||
		len(p.MissingPaths) != 1 || p.MissingPaths[0] != "logs/gone" || p.CompletionTime.IsZero() {
		t.Fatalf("lastPreload %+v, want model.bin's two blocks copied and logs/gone missing", p)
	}
	events := eventList(rec)
	if len(events) != 2 || !strings.Contains(events[0], "CachePreloaded") || !strings.Contains(events[1], `PreloadPathsMissing spec.preloadPaths[1] "logs/gone"`) {
		t.Fatalf("events %q, want CachePreloaded and PreloadPathsMissing naming the field", events)
	}
	reconcileOnce(t, r)
	if files.calls != 1 || len(rec.Events) != 0 {
		t.Fatalf("a second visit of the same generation preloaded again (%d maps, events %q)", files.calls, eventList(rec))
	}
}

func TestFailedPreloadIsRetriedAndToldOnce(t *testing.T) {
	files := &volumeFiles{unmounted: true}
	_, r, c, rec := attachedForPreload(t, files, "model.bin")
	reconcileOnce(t, r)
	p := get(t, c).Status.LastPreload
	if p == nil || !strings.Contains(p.Error, "spec.preloadPaths") || !strings.Contains(p.Error, "volumeMode Filesystem") {
		t.Fatalf("lastPreload %+v, want an error naming the field and what is allowed", p)
	}
	if events := eventList(rec); len(events) != 1 || !strings.Contains(events[0], "Warning PreloadFailed") {
		t.Fatalf("events %q, want PreloadFailed", events)
	}
	reconcileOnce(t, r)
	if files.calls != 2 || len(rec.Events) != 0 {
		t.Fatalf("after a failure: %d maps, events %q; want a retry told no second time", files.calls, eventList(rec))
	}
	files.unmounted = false
	reconcileOnce(t, r)
	if p := get(t, c).Status.LastPreload; p == nil || p.Error != "" || p.Bytes != 2<<16 {
		t.Fatalf("lastPreload %+v once mounted, want the blocks copied and no error", p)
	}
}

// Safety rule 4 during a preload: the SSD fails while a batch has the cache
// swapped out. The loss is a drop, as after a promotion of blocks read: the
// binding turns Degraded at the next visit.
func TestPreloadThatCannotLoadTheCacheBackIsADrop(t *testing.T) {
	n, r, c, _ := attachedForPreload(t, &volumeFiles{}, "model.bin")
	failLoadsOnceSwappedOut(n, cache.DeviceName(vol))
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	if why, ok := n.samples.Dropped(vol); !ok || !strings.Contains(why, "preload") {
		t.Fatalf("loss not recorded as a drop: %q", why)
	}
	reconcileOnce(t, r)
	if b := get(t, c); b.Status.Phase != ssdv1.PhaseDegraded {
		t.Fatalf("phase %s after the cache was lost, want Degraded", b.Status.Phase)
	}
}

// Preloaded on another node, the same generation's paths are preloaded
// again here: the hot set that would keep them warm stayed on that node.
func TestPreloadAgainOnAnotherNode(t *testing.T) {
	files := &volumeFiles{}
	_, r, c, _ := attachedForPreload(t, files, "model.bin")
	b := get(t, c)
	b.Status.LastPreload = &ssdv1.PreloadRecord{ObservedGeneration: b.Generation, NodeName: "node-b", Bytes: 2 << 16}
	if err := c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if p := get(t, c).Status.LastPreload; files.calls != 1 || p.NodeName != node {
		t.Fatalf("%d maps, lastPreload %+v; want the paths preloaded on %s", files.calls, p, node)
	}
}

// A preload larger than a visit's batches goes on a second later, says so
// in status meanwhile, and tells its whole copy once at the end.
func TestLargePreloadGoesOnAtTheNextVisit(t *testing.T) {
	size := uint64(cache.PreloadBatches*128<<20 + 1<<20) // two batches and 1 MiB more (the node's caches run smq: batches copied swapped out)
	files := &volumeFiles{length: size}
	_, r, c, rec := attachedForPreload(t, files, "model.bin")
	if res := reconcileOnce(t, r); res.RequeueAfter != preloadContinue {
		t.Fatalf("requeue %v after a partial preload, want %v", res.RequeueAfter, preloadContinue)
	}
	if p := get(t, c).Status.LastPreload; p == nil || !p.InProgress || p.Bytes != cache.PreloadBatches*128<<20 || len(eventList(rec)) != 0 {
		t.Fatalf("lastPreload %+v after one visit, want two batches copied, in progress, nothing told yet", p)
	}
	if res := reconcileOnce(t, r); res.RequeueAfter != DefaultResync {
		t.Fatalf("requeue %v once done", res.RequeueAfter)
	}
	p := get(t, c).Status.LastPreload
	if p == nil || p.InProgress || p.Bytes != int64(size) || p.HeldBytes != 0 {
		t.Fatalf("lastPreload %+v once done, want all %d bytes copied over two visits", p, size)
	}
	if events := eventList(rec); len(events) != 1 || !strings.Contains(events[0], fmt.Sprintf("%d bytes copied", size)) {
		t.Fatalf("events %q, want one CachePreloaded with the whole copy", events)
	}
}
