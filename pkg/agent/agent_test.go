package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/readtrack/readtrackfake"
)

const (
	vol  = "pvc-1"
	node = "node-a"
	gib  = 1 << 30
)

type fakeNode struct {
	dm      *dmfake.DM
	dev     *blockdevfake.Devices
	lvm     *lvmfake.LVM
	meta    *dmfake.Metadata
	hotSets *hotset.Memory
	reads   *readtrackfake.Tracker
	engine  *cache.Engine
	locks   *cache.VolumeLocks
	samples *Samples
	metrics *Metrics
	reg     *prometheus.Registry
	clock   *clocktesting.FakeClock
	monitor *Monitor
}

// layers are the node's fakes as an engine's OS layers.
func (n *fakeNode) layers() cache.Layers {
	return cache.Layers{DM: n.dm, LVM: n.lvm, Dev: n.dev, Metadata: n.meta, HotSets: n.hotSets, Reads: n.reads}
}

// withPromoter gives the node an engine whose caches that warm up are
// filled by a promoter (cache.WithPromoter).
func (n *fakeNode) withPromoter() {
	n.engine = cache.NewEngine(n.layers(), cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize, cache.WithPromoter())
	n.monitor = NewMonitor(n.engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
}

// testBlockSize: the engine of the tests makes 64 KiB cache blocks, in which
// the tests count their reads and promotions.
var testBlockSize = cache.WithBlockSectors(128)

func newNode(t *testing.T, layers ...func(*cache.Layers)) *fakeNode {
	t.Helper()
	n := &fakeNode{dm: dmfake.New(), dev: blockdevfake.New(), lvm: lvmfake.New(), meta: dmfake.NewMetadata(), hotSets: &hotset.Memory{}, reads: readtrackfake.New(),
		locks: cache.NewVolumeLocks(), samples: NewSamples(),
		reg: prometheus.NewRegistry(), clock: clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	n.lvm.AddVG("hdd", 100*gib, lvm.PoolTagPrefix+"origin")
	n.lvm.AddVG("nvme", 10*gib, lvm.PoolTagPrefix+"cache")
	if _, err := n.lvm.CreateLV(context.Background(), "hdd", vol, 10*gib, lvm.Tags(vol, lvm.RoleOrigin)); err != nil {
		t.Fatal(err)
	}
	l := n.layers()
	for _, change := range layers {
		change(&l)
	}
	n.engine = cache.NewEngine(l, cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	var err error
	if n.metrics, err = NewMetrics(n.reg); err != nil {
		t.Fatal(err)
	}
	n.monitor = NewMonitor(n.engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	return n
}

func (n *fakeNode) stage(t *testing.T, spec *cache.Spec) {
	t.Helper()
	n.stageVolume(t, vol, spec)
}

// stageVolume stages volume id, whose origin LV exists, with spec's cache.
func (n *fakeNode) stageVolume(t *testing.T, id string, spec *cache.Spec) {
	t.Helper()
	origin, err := n.engine.OriginLV(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engine.Stage(context.Background(), cache.StageSpec{VolumeID: id, Origin: origin}); err != nil {
		t.Fatal(err)
	}
	if spec == nil {
		return
	}
	if err := n.engine.Attach(context.Background(), id, *spec); err != nil {
		t.Fatal(err)
	}
}

func status(hits, misses, promotions uint64, tail string) string {
	return "0 20971520 cache 8 10/4096 128 100/16384 " +
		strconv.FormatUint(hits, 10) + " " + strconv.FormatUint(misses, 10) + " 0 0 0 " + strconv.FormatUint(promotions, 10) + " 0 1 writethrough 2 migration_threshold 2048 smq 0 " + tail
}

// Safety rule 4 during a promotion's copy into the serving cache: the
// failing cache asks the promotion holding the volume to give way, and the
// next tick drops it.
func TestFailingCacheAsksAPromotionToGiveWay(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	asked := 0
	if !n.locks.TryAcquireYielding(vol, func() { asked++; n.locks.Release(vol) }) {
		t.Fatal("volume locked")
	}
	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	if asked != 1 {
		t.Fatalf("the promotion was asked to give way %d times, want once", asked)
	}
	n.monitor.Tick(context.Background())
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("table %q after the promotion gave way, want linear", tbl)
	}
}

// Safety rule 4: a cache reporting Fail is swapped for a linear table by the
// next health tick, and the volume keeps its origin.
func TestSafetyRule4_FailingCacheDroppedOnline(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	var dropped []string
	n.monitor.onDrop = func(id string) { dropped = append(dropped, id) }
	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol)
	lin, ok := tbl.Target.(dm.LinearTarget)
	if !ok || lin.Device != (dm.DevNum{Major: 254, Minor: 1}) {
		t.Fatalf("table after failure %q", tbl)
	}
	if why, ok := n.samples.Dropped(vol); !ok || !strings.Contains(why, "Fail") || len(dropped) != 1 {
		t.Fatalf("drop not recorded: %q %v", why, dropped)
	}
	if got := testutil.ToFloat64(n.metrics.drops.With(n.metrics.labels(vol))); got != 1 {
		t.Fatalf("drops metric %v", got)
	}
}

func TestSafetyRule4_NeedsCheckAndReadOnlyDropped(t *testing.T) {
	for _, tail := range []string{"rw needs_check", "ro -"} {
		n := newNode(t)
		n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
		n.dm.StatusOverride["ssdcache-"+vol] = status(1, 1, 1, tail)
		n.monitor.Tick(context.Background())
		if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
			t.Errorf("%s: table %q", tail, tbl)
		}
	}
}

// A device left suspended by a change cut short (its process killed between
// suspend and resume) holds the application's I/O: once it has stayed
// suspended for LeftSuspendedAfter with its lock free, the monitor rolls it
// back; a change that holds the lock, or a short suspend, is left alone.
func TestMonitorResumesDeviceLeftSuspended(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	name := "ssdcache-" + vol
	live, _ := n.dm.Table(context.Background(), name)
	if err := n.dm.Suspend(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if err := n.dm.Load(context.Background(), name, dm.Table{Length: live.Length, Target: dm.LinearTarget{Device: dm.DevNum{Major: 9, Minor: 9}}}); err != nil {
		t.Fatal(err)
	}
	n.monitor.Tick(context.Background())
	n.clock.Step(LeftSuspendedAfter / 2)
	n.monitor.Tick(context.Background())
	if !n.dm.Suspended(name) {
		t.Fatal("the monitor resumed a device suspended for less than LeftSuspendedAfter (another process's change)")
	}
	n.locks.TryAcquire(vol)
	n.clock.Step(LeftSuspendedAfter)
	n.monitor.Tick(context.Background())
	if !n.dm.Suspended(name) {
		t.Fatal("the monitor resumed a device whose change holds the lock")
	}
	n.locks.Release(vol)
	n.clock.Step(time.Second)
	n.monitor.Tick(context.Background())
	if tbl, _ := n.dm.Table(context.Background(), name); n.dm.Suspended(name) || n.dm.HasInactive(name) || !tbl.Equal(live) {
		t.Fatalf("after a tick: table %q suspended=%v inactive=%v, want %q resumed", tbl, n.dm.Suspended(name), n.dm.HasInactive(name), live)
	}
}

// countingLVM counts the LVM reads the monitor causes.
type countingLVM struct {
	lvm.Interface
	lists int
}

func (c *countingLVM) ListLVs(ctx context.Context, vg string) ([]lvm.LV, error) {
	c.lists++
	return c.Interface.ListLVs(ctx, vg)
}

// The monitor runs every second for every volume: it must read the kernel
// only, and ask LVM which LVs back a cache once per live table, not per tick.
func TestMonitorAsksLVMOnlyWhenTheTableChanges(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	counting := &countingLVM{Interface: n.lvm}
	engine := cache.NewEngine(cache.Layers{DM: n.dm, LVM: counting, Dev: n.dev}, cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	mon := NewMonitor(engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	for range 10 {
		mon.Tick(context.Background())
		n.clock.Step(DefaultHealthInterval)
	}
	if counting.lists != 1 {
		t.Fatalf("10 ticks over one cached volume listed LVs %d times, want once", counting.lists)
	}
	if err := n.engine.Attach(context.Background(), vol, cache.Spec{SizeBytes: 2 * gib, Mode: cache.ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	counting.lists = 0
	for range 10 {
		mon.Tick(context.Background())
		n.clock.Step(DefaultHealthInterval)
	}
	if counting.lists != 1 {
		t.Fatalf("after a resize (new table), 10 ticks listed LVs %d times, want once", counting.lists)
	}
}

func TestMetricsAreWrapSafeDeltas(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	name := "ssdcache-" + vol
	n.dm.StatusOverride[name] = status(4294967290, 10, 3, "rw -")
	n.monitor.Tick(context.Background())
	n.clock.Step(DefaultSampleInterval)
	n.dm.StatusOverride[name] = status(5, 30, 7, "rw -") // hits wrapped by 11
	n.monitor.Tick(context.Background())
	if got := testutil.ToFloat64(n.metrics.readHits.With(n.metrics.labels(vol))); got != 11 {
		t.Fatalf("read hits %v, want 11", got)
	}
	if got := testutil.ToFloat64(n.metrics.readMisses.With(n.metrics.labels(vol))); got != 20 {
		t.Fatalf("read misses %v, want 20", got)
	}
	if got := testutil.ToFloat64(n.metrics.usedBlocks.With(n.metrics.labels(vol))); got != 100 {
		t.Fatalf("used blocks %v", got)
	}
	// Between sample intervals nothing is re-read into the series.
	n.dm.StatusOverride[name] = status(100, 30, 7, "rw -")
	n.clock.Step(time.Second)
	n.monitor.Tick(context.Background())
	if got := testutil.ToFloat64(n.metrics.readHits.With(n.metrics.labels(vol))); got != 11 {
		t.Fatalf("sampled before the interval: %v", got)
	}
}

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := ssdv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func admitted(mode ssdv1.CacheMode, size int64) *ssdv1.CacheBinding {
	return &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Generation: 1, Finalizers: []string{ssdv1.Finalizer}},
		Spec:       ssdv1.CacheBindingSpec{PVCName: "data", Size: "1Gi", Mode: mode},
		Status:     ssdv1.CacheBindingStatus{NodeName: node, VolumeHandle: vol, ResolvedSizeBytes: size, Phase: ssdv1.PhaseAdmitted},
	}
}

func (n *fakeNode) reconciler(t *testing.T, objs ...client.Object) (*BindingReconciler, client.Client, *events.FakeRecorder) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).WithStatusSubresource(&ssdv1.CacheBinding{}).Build()
	rec := events.NewFakeRecorder(10)
	return NewBindingReconciler(c, rec, n.engine, n.locks, n.samples, node, BindingOptions{Clock: n.clock, Metrics: n.metrics, CacheLost: n.monitor.CacheLost}), c, rec
}

func reconcileOnce(t *testing.T, r *BindingReconciler) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func get(t *testing.T, c client.Client) *ssdv1.CacheBinding {
	t.Helper()
	b := &ssdv1.CacheBinding{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "b"}, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBindingAttachesOnlineAndReportsReady(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, rec := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	if res := reconcileOnce(t, r); res.RequeueAfter != DefaultResync {
		t.Fatalf("requeue %v", res)
	}
	b := get(t, c)
	ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady)
	if b.Status.Phase != ssdv1.PhaseAttached || ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != 1 {
		t.Fatalf("status %+v", b.Status)
	}
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "cache" {
		t.Fatalf("table %q", tbl)
	}
	if e := <-rec.Events; !strings.Contains(e, "CacheAttached") {
		t.Fatalf("event %q", e)
	}
}

func TestBindingWaitsForStaging(t *testing.T) {
	n := newNode(t)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	ready := meta.FindStatusCondition(get(t, c).Status.Conditions, ssdv1.ConditionReady)
	if ready == nil || ready.Reason != ssdv1.ReasonVolumeNotStaged {
		t.Fatalf("ready %+v", ready)
	}
}

func TestBindingPausesAndDetachesOnDelete(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModePaused, gib))
	reconcileOnce(t, r)
	tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol)
	if _, ok := tbl.Target.(dm.LinearTarget); !ok || get(t, c).Status.Phase != ssdv1.PhasePaused {
		t.Fatalf("pause: table %q phase %s", tbl, get(t, c).Status.Phase)
	}
	if err := c.Delete(context.Background(), get(t, c)); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("after delete: table %q", tbl)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "b"}, &ssdv1.CacheBinding{}); err == nil {
		t.Fatal("binding still exists: finalizer not removed")
	}
}

func TestBindingDegradedAfterDropUntilSpecChanges(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	delete(n.dm.StatusOverride, "ssdcache-"+vol)
	reconcileOnce(t, r)
	b := get(t, c)
	deg := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionDegraded)
	if b.Status.Phase != ssdv1.PhaseDegraded || deg == nil || deg.Status != metav1.ConditionTrue {
		t.Fatalf("status %+v", b.Status)
	}
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("re-attached to a failed device: %q", tbl)
	}
	b.Generation = 2 // the user edits the spec to ask for another try
	b.Spec.Size = "2Gi"
	if err := c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r)
	if get(t, c).Status.Phase != ssdv1.PhaseAttached {
		t.Fatalf("no retry after spec change: %+v", get(t, c).Status)
	}
}

func TestFiguresWrittenAtMostOncePerInterval(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	name := "ssdcache-" + vol
	n.dm.StatusOverride[name] = status(30, 10, 5, "rw -")
	n.monitor.Tick(context.Background())
	reconcileOnce(t, r)
	first := get(t, c).Status.Cache
	if first == nil || first.HitRatio != "75.0%" || first.Promotions != 5 || first.RecentHitRatio != "" {
		t.Fatalf("figures %+v (no recent ratio from one sample)", first)
	}
	n.clock.Step(DefaultSampleInterval)
	n.dm.StatusOverride[name] = status(60, 10, 9, "rw -")
	n.monitor.Tick(context.Background())
	reconcileOnce(t, r)
	if got := get(t, c).Status.Cache; got.ReadHits != 30 {
		t.Fatalf("figures rewritten within the interval: %+v", got)
	}
	n.clock.Step(DefaultFiguresInterval)
	n.monitor.Tick(context.Background())
	reconcileOnce(t, r)
	// Since attach 60 of 70 reads hit; in the window since the first sample, all 30.
	if got := get(t, c).Status.Cache; got.ReadHits != 60 || got.HitRatio != "85.7%" || got.RecentHitRatio != "100.0%" {
		t.Fatalf("figures not refreshed after the interval: %+v", got)
	}
}

func TestRevokedAdmissionDetaches(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	revoke(t, c)
	reconcileOnce(t, r)
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("cache kept after admission was revoked: %q", tbl)
	}
}

func TestVolumeThroughputCountersFromDeltas(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	num := dm.DevNum{Major: 253, Minor: 1}
	n.dev.Stats[num] = blockdev.IOStats{ReadBytes: 1 << 20, WriteBytes: 4096}
	n.monitor.Tick(context.Background())
	n.dev.Stats[num] = blockdev.IOStats{ReadBytes: 5 << 20, WriteBytes: 8192}
	n.clock.Step(DefaultSampleInterval)
	n.monitor.Tick(context.Background())
	if got := testutil.ToFloat64(n.metrics.readBytes.With(n.metrics.labels(vol))); got != 4<<20 {
		t.Fatalf("read bytes %v, want %d", got, 4<<20)
	}
	if got := testutil.ToFloat64(n.metrics.writtenBytes.With(n.metrics.labels(vol))); got != 4096 {
		t.Fatalf("written bytes %v", got)
	}
}

// Safety rule 4 when only the data device dies: dm-cache's status stays
// healthy until a metadata commit fails, so the monitor reads the devices.
func TestSafetyRule4_DeadCacheDeviceDroppedBeforeDMCacheNotices(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	n.dev.Failing["/dev/nvme/pvc-1.cache-data"] = true
	n.monitor.Tick(context.Background())
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("table after the data device died: %q", tbl)
	}
	if why, ok := n.samples.Dropped(vol); !ok || !strings.Contains(why, "cache-data") {
		t.Fatalf("drop not recorded with its cause: %q", why)
	}
}

// unstagingDM removes the volume's device right after reading its status,
// as a NodeUnstage running between the monitor's reads would.
type unstagingDM struct {
	*dmfake.DM
}

func (u unstagingDM) Status(ctx context.Context, name string) (string, error) {
	status, err := u.DM.Status(ctx, name)
	if err == nil {
		err = u.DM.Remove(ctx, name)
	}
	return status, err
}

// A volume unstaged between the tick's read of its state and its look at
// that volume's LVs is skipped until the next tick: it crashed the plugin
// in make stress (32 volumes staged and unstaged at once).
func TestMonitorSkipsAVolumeUnstagedDuringTheTick(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	engine := cache.NewEngine(cache.Layers{DM: unstagingDM{n.dm}, LVM: n.lvm, Dev: n.dev},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	var dropped []string
	mon := NewMonitor(engine, n.dev, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock, OnDrop: func(id string) { dropped = append(dropped, id) }})
	mon.Tick(context.Background())
	if len(dropped) != 0 {
		t.Fatalf("a volume unstaged during the tick was dropped: %v", dropped)
	}
}

// A volume sampled before its binding is read (a plugin restart) gets its
// PVC's labels from the binding, with its counters carried over: one series
// per volume, never a reset.
func TestMetricsTakeThePVCFromTheBinding(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	name := "ssdcache-" + vol
	n.dm.StatusOverride[name] = status(10, 10, 1, "rw -")
	n.monitor.Tick(context.Background())
	n.clock.Step(DefaultSampleInterval)
	n.dm.StatusOverride[name] = status(40, 10, 1, "rw -")
	n.monitor.Tick(context.Background())
	unowned := prometheus.Labels{LabelVolume: vol, LabelNamespace: "", LabelPVC: ""}
	if got := testutil.ToFloat64(n.metrics.readHits.With(unowned)); got != 30 {
		t.Fatalf("read hits before the binding: %v", got)
	}
	r, _, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	owned := prometheus.Labels{LabelVolume: vol, LabelNamespace: "ns", LabelPVC: "data"}
	if got := testutil.ToFloat64(n.metrics.readHits.With(owned)); got != 30 {
		t.Fatalf("read hits under the PVC's labels: %v, want the 30 carried over", got)
	}
	n.clock.Step(DefaultSampleInterval)
	n.dm.StatusOverride[name] = status(50, 10, 1, "rw -")
	n.monitor.Tick(context.Background())
	if got := testutil.ToFloat64(n.metrics.readHits.With(owned)); got != 40 {
		t.Fatalf("read hits after another sample: %v", got)
	}
	for _, c := range []prometheus.Collector{n.metrics.readHits, n.metrics.usedBlocks} {
		if got := testutil.CollectAndCount(c); got != 1 {
			t.Errorf("%d series for one volume, want 1", got)
		}
	}
}

// NodeStage's owner comes first; unstaging forgets it with the series.
func TestMetricsForgetAnUnstagedVolume(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	n.metrics.SetOwner(vol, VolumeOwner{Namespace: "ns", PVC: "data"})
	num := dm.DevNum{Major: 253, Minor: 1}
	n.dev.Stats[num] = blockdev.IOStats{ReadBytes: 1 << 20}
	n.monitor.Tick(context.Background())
	n.dev.Stats[num] = blockdev.IOStats{ReadBytes: 3 << 20}
	n.clock.Step(DefaultSampleInterval)
	n.monitor.Tick(context.Background())
	owned := prometheus.Labels{LabelVolume: vol, LabelNamespace: "ns", LabelPVC: "data"}
	if got := testutil.ToFloat64(n.metrics.readBytes.With(owned)); got != 2<<20 {
		t.Fatalf("read bytes %v", got)
	}
	if err := n.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	n.clock.Step(DefaultSampleInterval)
	n.monitor.Tick(context.Background())
	if got := testutil.CollectAndCount(n.metrics.readBytes); got != 0 {
		t.Fatalf("%d read byte series after unstage", got)
	}
	if _, ok := n.metrics.owners[vol]; ok {
		t.Fatal("owner kept after unstage")
	}
}

// racingProbe fails the first read of a cache data device and, before it
// returns, runs race: the read met a change that removed that LV and made a
// new one under the same name.
type racingProbe struct {
	*blockdevfake.Devices
	race  func()
	raced bool
}

func (r *racingProbe) ProbeRead(path string) error {
	if r.raced || !strings.HasSuffix(path, ".cache-data") {
		return r.Devices.ProbeRead(path)
	}
	r.raced = true
	r.race()
	return fmt.Errorf("open %s: no such file or directory", path)
}

// A cache resized between the monitor's probe (which fails on the LV the
// resize removed) and its drop is the new, healthy cache: it stays.
func TestMonitorKeepsACacheReplacedAfterItsProbe(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	probe := &racingProbe{Devices: n.dev}
	n.engine = cache.NewEngine(cache.Layers{DM: n.dm, LVM: n.lvm, Dev: probe, Metadata: n.meta, HotSets: n.hotSets},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil, testBlockSize)
	n.monitor = NewMonitor(n.engine, probe, n.locks, n.samples, n.metrics, MonitorOptions{Clock: n.clock})
	probe.race = func() {
		if _, err := n.engine.SetCache(context.Background(), vol, &cache.Spec{SizeBytes: 2 * gib, Mode: cache.ModeReadCache}); err != nil {
			t.Error(err)
		}
	}
	n.monitor.Tick(context.Background())
	if !probe.raced {
		t.Fatal("the monitor did not probe the cache")
	}
	tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol)
	if _, ok := tbl.Target.(dm.CacheTarget); !ok {
		t.Fatalf("the resized cache was dropped: table %q", tbl)
	}
	if why, dropped := n.samples.Dropped(vol); dropped {
		t.Fatalf("a drop was recorded: %s", why)
	}
	if got := testutil.ToFloat64(n.metrics.drops.With(n.metrics.labels(vol))); got != 0 {
		t.Fatalf("drops metric %v", got)
	}
}
