package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// hangingReads is a node's block devices where reads of the paths in hung
// never return until release closes, as reads of an NVMe whose controller
// never completes them; reads counts the reads of each path.
type hangingReads struct {
	*blockdevfake.Devices
	release chan struct{}
	mu      sync.Mutex
	hung    map[string]bool
	reads   map[string]int
}

func (h *hangingReads) ProbeRead(path string) error {
	h.mu.Lock()
	h.reads[path]++
	hung := h.hung[path]
	h.mu.Unlock()
	if hung {
		<-h.release
	}
	return h.Devices.ProbeRead(path)
}

func (h *hangingReads) readsOf(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reads[path]
}

// twoCachedVolumes stages vol and pvc-2 cached, on a node whose reads of
// vol's cache data device hang.
func twoCachedVolumes(t *testing.T) (*fakeNode, *hangingReads) {
	n := newNode(t)
	reads := &hangingReads{Devices: n.dev, release: make(chan struct{}), hung: map[string]bool{}, reads: map[string]int{}}
	t.Cleanup(func() { close(reads.release) })
	n.engine = cache.NewEngine(cache.Layers{DM: n.dm, LVM: n.lvm, Dev: reads, Metadata: n.meta, HotSets: n.hotSets},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	n.monitor = NewMonitor(n.engine, reads, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	if _, err := n.lvm.CreateLV(context.Background(), "hdd", "pvc-2", gib, lvm.Tags("pvc-2", lvm.RoleOrigin)); err != nil {
		t.Fatal(err)
	}
	origin, err := n.engine.OriginLV(context.Background(), "pvc-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engine.Stage(context.Background(), cache.StageSpec{VolumeID: "pvc-2", Origin: origin}); err != nil {
		t.Fatal(err)
	}
	if err := n.engine.Attach(context.Background(), "pvc-2", cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	reads.hung["/dev/nvme/pvc-1.cache-data"] = true
	return n, reads
}

// tickWithin runs one tick and fails the test if it has not returned in
// time: on a monitor that waits for every probe, it never does.
func tickWithin(t *testing.T, m *Monitor) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Tick(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a tick did not return: the monitor waits on a cache device that never answers")
	}
}

func isLinear(t *testing.T, n *fakeNode, id string) bool {
	tbl, err := n.dm.Table(context.Background(), cache.DeviceName(id))
	if err != nil {
		t.Fatal(err)
	}
	_, ok := tbl.Target.(dm.LinearTarget)
	return ok
}

// Issue 37 point 2: a read of volume A's cache that never returns holds up
// neither the drop of volume B's failing cache nor the recovery of A's
// device left suspended; A is not probed a second time while its first
// read hangs, and after ProbeTimeout it is reported as not answering and
// dropped.
func TestHungCacheDeviceHoldsUpNoOtherVolume(t *testing.T) {
	n, reads := twoCachedVolumes(t)
	var notified []string
	var mu sync.Mutex
	n.monitor.onDrop = func(id string) { mu.Lock(); notified = append(notified, id); mu.Unlock() }
	a := cache.DeviceName(vol)
	if err := n.dm.Suspend(context.Background(), a); err != nil { // left so by a change cut short
		t.Fatal(err)
	}
	tickWithin(t, n.monitor)

	n.dm.StatusOverride[cache.DeviceName("pvc-2")] = "0 2097152 cache Fail"
	n.clock.Step(time.Second)
	tickWithin(t, n.monitor)
	if !isLinear(t, n, "pvc-2") {
		t.Fatal("volume B's failing cache was not dropped while A's cache read hangs")
	}
	if _, dropped := n.samples.Dropped(vol); dropped {
		t.Fatal("A reported failing before ProbeTimeout")
	}

	n.clock.Step(LeftSuspendedAfter)
	tickWithin(t, n.monitor)
	if n.dm.Suspended(a) {
		t.Fatal("A's device left suspended was not resumed while A's cache read hangs")
	}
	if got := reads.readsOf("/dev/nvme/pvc-1.cache-data"); got != 1 {
		t.Fatalf("A's cache data device read %d times, want once: a read in flight is not started again", got)
	}
	why, dropped := n.samples.Dropped(vol)
	if !dropped || !strings.Contains(why, "did not answer a read within "+ProbeTimeout.String()) {
		t.Fatalf("A after ProbeTimeout: dropped=%v why=%q, want not answering", dropped, why)
	}
	if got := testutil.ToFloat64(n.metrics.healthy.With(n.metrics.labels(vol))); got != 0 {
		t.Fatalf("A's healthy gauge %v, want 0", got)
	}
	if !isLinear(t, n, vol) {
		t.Fatal("A's cache was not dropped after it stopped answering")
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(notified, ",") != "pvc-2,pvc-1,pvc-1" { // B's drop; A not answering, then dropped
		t.Fatalf("bindings told about %v", notified)
	}
}

// hangingDrop is a device-mapper whose suspend without flush of one device
// waits, whatever its context, until release closes: dm-cache's
// postsuspend committing metadata to a metadata device that never answers.
type hangingDrop struct {
	*dmfake.DM
	device   string
	release  chan struct{}
	mu       sync.Mutex
	suspends int
}

func (h *hangingDrop) SuspendNoFlush(ctx context.Context, name string) error {
	if name == h.device {
		h.mu.Lock()
		h.suspends++
		h.mu.Unlock()
		<-h.release
	}
	return h.DM.SuspendNoFlush(context.Background(), name)
}

func (h *hangingDrop) suspendsOf() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.suspends
}

// A drop that waits on the failing device (its suspend in the kernel)
// holds the volume's lock and nothing else: the other volume's failing
// cache is dropped, the hung drop is not started twice, and it completes
// once the device answers.
func TestHungDropHoldsUpNoOtherVolume(t *testing.T) {
	n := newNode(t)
	hd := &hangingDrop{DM: n.dm, device: cache.DeviceName(vol), release: make(chan struct{})}
	released := false
	t.Cleanup(func() {
		if !released {
			close(hd.release)
		}
	})
	n.engine = cache.NewEngine(cache.Layers{DM: hd, LVM: n.lvm, Dev: n.dev, Metadata: n.meta, HotSets: n.hotSets},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	n.monitor = NewMonitor(n.engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	if _, err := n.lvm.CreateLV(context.Background(), "hdd", "pvc-2", gib, lvm.Tags("pvc-2", lvm.RoleOrigin)); err != nil {
		t.Fatal(err)
	}
	origin, err := n.engine.OriginLV(context.Background(), "pvc-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engine.Stage(context.Background(), cache.StageSpec{VolumeID: "pvc-2", Origin: origin}); err != nil {
		t.Fatal(err)
	}
	if err := n.engine.Attach(context.Background(), "pvc-2", cache.Spec{SizeBytes: 64 << 20, Mode: cache.ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	n.dm.StatusOverride[cache.DeviceName(vol)] = "0 20971520 cache Fail"
	tickWithin(t, n.monitor)
	if n.locks.TryAcquire(vol) {
		t.Fatal("the volume's lock is free while its drop waits on the device")
	}
	n.dm.StatusOverride[cache.DeviceName("pvc-2")] = "0 2097152 cache Fail"
	for range 3 {
		n.clock.Step(time.Second)
		tickWithin(t, n.monitor)
	}
	if !isLinear(t, n, "pvc-2") {
		t.Fatal("volume B's failing cache was not dropped while A's drop hangs")
	}
	if got := hd.suspendsOf(); got != 1 {
		t.Fatalf("A's drop suspended %d times while the first hangs, want once", got)
	}
	close(hd.release)
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for !isLinear(t, n, vol) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	n.clock.Step(time.Second)
	tickWithin(t, n.monitor)
	if !isLinear(t, n, vol) {
		t.Fatal("A's drop did not complete once the device answered")
	}
	if got := testutil.ToFloat64(n.metrics.drops.With(n.metrics.labels(vol))); got != 1 {
		t.Fatalf("A's drops metric %v, want 1", got)
	}
}
