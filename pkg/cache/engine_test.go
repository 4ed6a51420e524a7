package cache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/readtrack/readtrackfake"
)

// world is a node made of fakes that share one ordered event log.
type world struct {
	dm      *dmfake.DM
	lvm     *lvmfake.LVM
	dev     *blockdevfake.Devices
	meta    *dmfake.Metadata
	hotSets *hotset.Memory
	reads   *readtrackfake.Tracker
	events  []string
	engine  *Engine
	// engineOpts are what restart makes engines with.
	engineOpts []Option
	faults     FaultPoints
}

const (
	vol = "pvc-1"
	gib = uint64(1 << 30)
)

var testPools = Pools{OriginVG: "ssdcache-hdd", CacheVGs: map[string]string{"nvme": "ssdcache-nvme"}, DefaultClass: "nvme"}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{dm: dmfake.New(), lvm: lvmfake.New(), dev: blockdevfake.New(), meta: dmfake.NewMetadata(), hotSets: &hotset.Memory{}, reads: readtrackfake.New()}
	rec := func(e string) { w.events = append(w.events, e) }
	w.dm.Record, w.lvm.Record, w.dev.Record = rec, rec, rec
	w.lvm.AddVG("ssdcache-hdd", 100*gib, lvm.PoolTagPrefix+"origin")
	w.lvm.AddVG("ssdcache-nvme", 10*gib, lvm.PoolTagPrefix+"cache")
	origin, err := w.lvm.CreateLV(context.Background(), "ssdcache-hdd", vol, 10*gib, lvm.Tags(vol, lvm.RoleOrigin))
	if err != nil {
		t.Fatal(err)
	}
	_ = origin
	w.events = nil
	w.engineOpts = []Option{WithBlockSectors(blockSecs)}
	w.restart()
	return w
}

// restart gives the world a new engine, as after a restart of the node
// plugin: the kernel's tables, the LVs and the files stay, what the
// engine knew in memory is gone.
func (w *world) restart() {
	w.engine = NewEngine(w.layers(), testPools, faultsFunc(func(ctx context.Context, p string) {
		if w.faults != nil {
			w.faults.Reached(ctx, p)
		}
	}), w.engineOpts...)
}

// withPromoter makes the world's engines those of a node whose promoter
// fills caches that warm up.
func (w *world) withPromoter() {
	w.engineOpts = append(w.engineOpts, WithPromoter())
	w.restart()
}

// layers are the world's fakes as an engine's OS layers.
func (w *world) layers() Layers {
	return Layers{DM: w.dm, LVM: w.lvm, Dev: w.dev, Metadata: w.meta, HotSets: w.hotSets, Reads: w.reads}
}

type faultsFunc func(context.Context, string)

func (f faultsFunc) Reached(ctx context.Context, p string) { f(ctx, p) }

func readCache(size uint64) *Spec { return &Spec{SizeBytes: size, Mode: ModeReadCache} }

func (w *world) table(t *testing.T) dm.Table {
	t.Helper()
	tbl, err := w.dm.Table(context.Background(), DeviceName(vol))
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// metaPathOf is the path of the cache LV with device number num ("" if none).
func (w *world) metaPathOf(num dm.DevNum) string {
	lvs, _ := w.lvm.ListLVs(context.Background(), "ssdcache-nvme")
	for _, lv := range lvs {
		if lv.DevNum == num {
			return lv.Path
		}
	}
	return ""
}

// liveMeta is what the metadata LV of the volume's live cache table maps: a
// promotion into a serving cache moves it to the other metadata LV.
func (w *world) liveMeta(t *testing.T) dm.CacheMetadata {
	t.Helper()
	c, ok := w.table(t).Target.(dm.CacheTarget)
	if !ok {
		t.Fatalf("table %q, want a cache", w.table(t))
	}
	md, _ := w.meta.Get(w.metaPathOf(c.Metadata))
	return md
}

func (w *world) cacheLVs(t *testing.T) []string {
	t.Helper()
	lvs, err := w.lvm.ListLVs(context.Background(), "ssdcache-nvme")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, lv := range lvs {
		names = append(names, lv.Name)
	}
	return names
}

// stage brings the volume up and gives it spec's cache (none for nil), as
// NodeStage and then the node agent do.
func (w *world) stage(t *testing.T, spec *Spec) {
	t.Helper()
	if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: w.origin(t)}); err != nil {
		t.Fatal(err)
	}
	if spec == nil {
		return
	}
	if err := w.engine.Attach(context.Background(), vol, *spec); err != nil {
		t.Fatal(err)
	}
}

func (w *world) origin(t *testing.T) Origin {
	t.Helper()
	o, err := w.engine.OriginLV(context.Background(), vol)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// indexOf returns the position of the first event containing all parts.
func indexOf(events []string, parts ...string) int {
	return slices.IndexFunc(events, func(e string) bool {
		for _, p := range parts {
			if !strings.Contains(e, p) {
				return false
			}
		}
		return true
	})
}

func TestStageIsLinearOverOrigin(t *testing.T) {
	w := newWorld(t)
	path, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: w.origin(t)})
	if err != nil || path != "/dev/mapper/ssdcache-pvc-1" {
		t.Fatalf("device path %s, %v", path, err)
	}
	want := "0 20971520 linear 254:1 0"
	if got := w.table(t).String(); got != want {
		t.Fatalf("table %q, want %q", got, want)
	}
	if len(w.cacheLVs(t)) != 0 {
		t.Fatalf("uncached volume got cache LVs %v", w.cacheLVs(t))
	}
}

func TestStageCachedBuildsWritethroughTable(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	c, ok := w.table(t).Target.(dm.CacheTarget)
	if !ok {
		t.Fatalf("table %q is not a cache", w.table(t))
	}
	if c.Mode != dm.Writethrough || c.Policy != "smq" || c.BlockSectors != blockSecs || c.Origin != (dm.DevNum{Major: 254, Minor: 1}) {
		t.Fatalf("cache target %+v", c)
	}
	if got := w.cacheLVs(t); !slices.Equal(got, []string{"pvc-1.cache-data", "pvc-1.cache-meta"}) {
		t.Fatalf("cache LVs %v", got)
	}
}

// Safety rule 2: metadata is zeroed before any cache table is loaded over it.
func TestSafetyRule2_MetadataZeroedBeforeCacheLoad(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	zero := indexOf(w.events, "zero /dev/ssdcache-nvme/pvc-1.cache-meta")
	load := indexOf(w.events, "dm load", " cache ")
	if zero < 0 || load < 0 || zero > load {
		t.Fatalf("zero at %d, cache load at %d; events:\n%s", zero, load, strings.Join(w.events, "\n"))
	}
}

// Safety rule 2: after a reboot (dm devices gone, LVs kept) the old metadata
// is never trusted.
func TestSafetyRule2_StaleMetadataZeroedAfterReboot(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.dm = dmfake.New()
	w.dm.Record = func(e string) { w.events = append(w.events, e) }
	w.engine.dm = w.dm
	w.events = nil
	w.stage(t, readCache(gib))
	if indexOf(w.events, "lvm createlv") >= 0 {
		t.Fatalf("reboot recreated LVs that fit: %v", w.events)
	}
	zero, load := indexOf(w.events, "zero", "cache-meta"), indexOf(w.events, "dm load", " cache ")
	if zero < 0 || zero > load {
		t.Fatalf("stale metadata not zeroed before load: %v", w.events)
	}
}

// Safety rule 2, the other way: metadata a live table uses is never zeroed.
func TestSafetyRule2_LiveMetadataNeverZeroed(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.events = nil
	w.stage(t, readCache(gib)) // repeated NodeStage
	if err := w.engine.Attach(context.Background(), vol, Spec{SizeBytes: gib, Mode: ModePaused}); err != nil {
		t.Fatal(err)
	}
	if indexOf(w.events, "zero") >= 0 {
		t.Fatalf("live metadata zeroed: %v", w.events)
	}
	if _, ok := w.table(t).Target.(dm.LinearTarget); !ok || len(w.cacheLVs(t)) != 2 {
		t.Fatalf("pause left table %s and cache LVs %v, want linear with both kept", w.table(t), w.cacheLVs(t))
	}
}

// Safety rule 1: detaching is a table swap to linear over the same origin,
// with no flush, no cleaner policy and no message to the cache.
func TestSafetyRule1_DetachNeedsNoFlush(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.events = nil
	if err := w.engine.Detach(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"dm suspend ssdcache-pvc-1",
		"dm load ssdcache-pvc-1 0 20971520 linear 254:1 0",
		"dm resume ssdcache-pvc-1",
		"lvm removelv ssdcache-nvme/pvc-1.cache-data",
		"lvm removelv ssdcache-nvme/pvc-1.cache-meta",
	}
	if !slices.Equal(w.events, want) {
		t.Fatalf("detach events:\n%s\nwant:\n%s", strings.Join(w.events, "\n"), strings.Join(want, "\n"))
	}
}

func TestResizeRecreatesCacheOnline(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	if err := w.engine.Attach(context.Background(), vol, Spec{SizeBytes: 2 * gib, Mode: ModeReadCache}); err != nil {
		t.Fatal(err)
	}
	st, err := w.engine.Inspect(context.Background(), vol)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Cached || st.Spec.SizeBytes != 2*gib || st.Status == nil || st.Status.Mode != dm.Writethrough {
		t.Fatalf("after resize: %+v", st)
	}
	if w.dm.Suspended(DeviceName(vol)) {
		t.Fatal("device left suspended")
	}
}

func TestReloadFailureKeepsOldTableLive(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	before := w.table(t)
	w.dm.FailOn["load"] = errors.New("dm-cache: could not open metadata")
	err := w.engine.Attach(context.Background(), vol, *readCache(gib))
	if err == nil || !strings.Contains(err.Error(), "could not open metadata") {
		t.Fatalf("err = %v", err)
	}
	if !w.table(t).Equal(before) || w.dm.Suspended(DeviceName(vol)) || w.dm.HasInactive(DeviceName(vol)) {
		t.Fatalf("failed load left table %q suspended=%v", w.table(t), w.dm.Suspended(DeviceName(vol)))
	}
}

// A reload whose caller's context ends between load and resume (kubelet's
// deadline, SIGTERM in a rollout) must still put the old table back in
// service: the rollback runs on a context of its own.
func TestReloadRollsBackAfterTheCallersDeadline(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	before := w.table(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.faults = faultsFunc(func(_ context.Context, p string) {
		if strings.HasSuffix(p, "/loaded") {
			cancel()
		}
	})
	if err := w.engine.Attach(ctx, vol, *readCache(gib)); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the caller's context error", err)
	}
	if w.dm.Suspended(DeviceName(vol)) || w.dm.HasInactive(DeviceName(vol)) || !w.table(t).Equal(before) {
		t.Fatalf("after the deadline: table %q suspended=%v inactive=%v, want %q live and resumed",
			w.table(t), w.dm.Suspended(DeviceName(vol)), w.dm.HasInactive(DeviceName(vol)), before)
	}
}

// A suspend that reports failure may have suspended the device (dmsetup
// killed after its ioctl): the reload resumes it before giving up.
func TestFailedSuspendIsResumed(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	w.dm.FailAfter["suspend"] = errors.New("dmsetup suspend: signal: killed")
	if err := w.engine.Attach(context.Background(), vol, *readCache(gib)); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("err = %v", err)
	}
	if w.dm.Suspended(DeviceName(vol)) {
		t.Fatal("a failed suspend left the device suspended")
	}
}

func TestStageRefusesOtherOrigin(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	w.dev.Add("/dev/disk/by-id/ata-other", blockdevfake.Device{Node: "/dev/sdc", Size: gib, DevNum: dm.DevNum{Major: 8, Minor: 32}})
	other, err := w.engine.OriginDisk(context.Background(), "/dev/disk/by-id/ata-other")
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.engine.Stage(context.Background(), StageSpec{VolumeID: vol, Origin: other})
	if !errors.Is(err, ErrOriginMismatch) {
		t.Fatalf("err = %v", err)
	}
}

func TestDropCacheLeavesLVsAlone(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.events = nil
	if err := w.engine.DropCache(context.Background(), vol, w.table(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.table(t).Target.(dm.LinearTarget); !ok {
		t.Fatalf("table %q", w.table(t))
	}
	if indexOf(w.events, "lvm") >= 0 || indexOf(w.events, "zero") >= 0 {
		t.Fatalf("drop touched the cache device: %v", w.events)
	}
}

func TestGrowReloadsWithNewLength(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	if err := w.lvm.ExtendLV(context.Background(), "ssdcache-hdd", vol, 20*gib); err != nil {
		t.Fatal(err)
	}
	if err := w.engine.Grow(context.Background(), vol, w.origin(t)); err != nil {
		t.Fatal(err)
	}
	tbl := w.table(t)
	if tbl.Length != 20*gib/512 {
		t.Fatalf("length %d", tbl.Length)
	}
	if _, ok := tbl.Target.(dm.CacheTarget); !ok {
		t.Fatalf("grow lost the cache: %q", tbl)
	}
}

// Unstage removes the device and keeps a cleanly shut down cache's LVs,
// tagged, for the next stage; Detach of the unstaged volume removes them.
func TestUnstageKeepsACleanCacheAndDetachRemovesIt(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.events = nil
	for i := 0; i < 2; i++ { // the second call must be a no-op
		if err := w.engine.Unstage(context.Background(), vol); err != nil {
			t.Fatal(err)
		}
	}
	if devs, _ := w.dm.List(context.Background()); len(devs) != 0 {
		t.Fatalf("devices left: %v", devs)
	}
	// The kept blocks are durable before the tag says they may be trusted.
	flush := slices.Index(w.events, "flush /dev/ssdcache-nvme/pvc-1.cache-data")
	tag := slices.IndexFunc(w.events, func(e string) bool { return strings.HasPrefix(e, "lvm changetags ") })
	if flush < 0 || tag < flush {
		t.Fatalf("unstage flushed the data LV at event %d and tagged at %d, want the flush first:\n%s", flush, tag, strings.Join(w.events, "\n"))
	}
	obs := w.mustObserve(t)
	if meta, kept := taggedClean(obs.cacheLVs); len(obs.cacheLVs) != 2 || !kept || meta.Role() != lvm.RoleCacheMetadata {
		t.Fatalf("cache LVs after unstage: %+v, want the pair kept with the metadata LV tagged %s", obs.cacheLVs, UnstagedCleanTag)
	}
	if err := w.engine.Detach(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	if lvs := w.cacheLVs(t); len(lvs) != 0 {
		t.Fatalf("cache LVs left after detaching the unstaged volume: %v", lvs)
	}
}

func TestUnknownClassIsNamed(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	_, err := w.engine.SetCache(context.Background(), vol, &Spec{SizeBytes: gib, Mode: ModeReadCache, Class: "optane"})
	if !errors.Is(err, ErrUnknownClass) || !strings.Contains(err.Error(), `"optane"`) || !strings.Contains(err.Error(), "nvme") {
		t.Fatalf("err = %v", err)
	}
}

func TestInvalidInputs(t *testing.T) {
	w := newWorld(t)
	for _, id := range []string{"", "-x", "a/b", "has space", strings.Repeat("x", 97)} {
		if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: id, Origin: w.origin(t)}); !errors.Is(err, ErrInvalid) {
			t.Errorf("volume ID %q: err = %v", id, err)
		}
	}
	for _, spec := range []Spec{{SizeBytes: 1 << 20, Mode: ModeReadCache}, {SizeBytes: gib, Mode: "WriteBack"}} {
		if err := spec.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("spec %+v: err = %v", spec, err)
		}
	}
}

func TestVolumeLocks(t *testing.T) {
	l := NewVolumeLocks()
	if !l.TryAcquire("a") || l.TryAcquire("a") || !l.TryAcquire("b") {
		t.Fatal("lock semantics broken")
	}
	l.Release("a")
	if !l.TryAcquire("a") {
		t.Fatal("released lock not reusable")
	}
}

// A holder that took the lock yielding is asked to give way while it holds
// it, and only then; other holders are not asked.
func TestVolumeLockHolderYieldsOnRequest(t *testing.T) {
	l := NewVolumeLocks()
	asked := 0
	if !l.TryAcquireYielding("a", func() { asked++ }) || l.TryAcquireYielding("a", func() { t.Fatal("a second holder") }) {
		t.Fatal("lock semantics broken")
	}
	l.Yield("a")
	l.Release("a")
	l.Yield("a")
	l.TryAcquire("a")
	l.Yield("a")
	if asked != 1 {
		t.Fatalf("the yielding holder was asked %d times, want once (while it held the lock)", asked)
	}
}

func TestVolumeLockWaitsForItsHolderWithinItsContext(t *testing.T) {
	l := NewVolumeLocks()
	l.TryAcquire("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l.Acquire(ctx, "a") {
		t.Fatal("took a held lock after its context ended")
	}
	got := make(chan bool)
	go func() { got <- l.Acquire(context.Background(), "a") }()
	select {
	case <-got:
		t.Fatal("took the lock while it was held")
	case <-time.After(20 * time.Millisecond):
	}
	l.Release("a")
	if !<-got {
		t.Fatal("did not take the lock once it was released")
	}
	if l.TryAcquire("a") {
		t.Fatal("the waiter's lock is not held")
	}
	l.Release("a")
	l.Release("a") // releasing a free lock is harmless
}

func ExampleEngine_SetCache() {
	fmt.Println(plan(observed{staged: true, table: dm.Table{Length: 8, Target: dm.LinearTarget{Device: dm.DevNum{Major: 8}}}},
		desired{origin: dm.DevNum{Major: 8}, length: 8, cache: readCache(gib), vg: "ssdcache-nvme", minBlockSectors: blockSecs}))
	// Output: [create-cache-lvs zero-metadata load-cache]
}

// The StoreMI case: an existing disk is staged through the same dm path,
// and a pool device is never accepted as one.
func TestOriginDisk(t *testing.T) {
	w := newWorld(t)
	w.dev.Add("/dev/disk/by-id/ata-data", blockdevfake.Device{Node: "/dev/sdc", Size: 4 * gib, DevNum: dm.DevNum{Major: 8, Minor: 32}})
	// LVM, restricted to the pool devices, names the pool's PV by its by-id alias.
	w.dev.Add("/dev/disk/by-id/ata-pool", blockdevfake.Device{Node: "/dev/sdb", Size: 4 * gib, DevNum: dm.DevNum{Major: 8, Minor: 16},
		Signatures: []blockdev.Signature{{Type: blockdev.LVMMember, Offset: "0x218"}}})
	w.lvm.AddPV("/dev/disk/by-id/ata-pool", "ssdcache-hdd")
	disk, err := w.engine.OriginDisk(context.Background(), "/dev/disk/by-id/ata-data")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.engine.Stage(context.Background(), StageSpec{VolumeID: "data", Origin: disk}); err != nil {
		t.Fatal(err)
	}
	if err := w.engine.Attach(context.Background(), "data", *readCache(gib)); err != nil {
		t.Fatal(err)
	}
	if indexOf(w.events, "zero /dev/disk") >= 0 || indexOf(w.events, "wipe") >= 0 {
		t.Fatalf("staging wrote to the disk: %v", w.events)
	}
	tbl, _ := w.dm.Table(context.Background(), DeviceName("data"))
	if c, ok := tbl.Target.(dm.CacheTarget); !ok || c.Origin != disk.DevNum || tbl.Length != 4*gib/512 {
		t.Fatalf("table %q", tbl)
	}
	_, err = w.engine.OriginDisk(context.Background(), "/dev/disk/by-id/ata-pool")
	if !errors.Is(err, lvm.ErrDeviceInUse) {
		t.Fatalf("pool device as origin: err = %v", err)
	}
	if _, err := w.engine.OriginDisk(context.Background(), "/dev/sdc"); !errors.Is(err, lvm.ErrInvalidDevice) {
		t.Fatalf("kernel name accepted: %v", err)
	}
}

// A static volume must be a whole disk nobody else uses: a dm-name link to
// another volume's origin LV (two caches over one origin: stale reads, double
// mounts) and a disk with a device stacked on it are refused.
func TestOriginDiskRefusesStackedDevices(t *testing.T) {
	w := newWorld(t)
	w.dev.Add("/dev/disk/by-id/dm-name-ssdcache--hdd-pvc--1", blockdevfake.Device{Node: "/dev/dm-1", Size: 10 * gib, DevNum: dm.DevNum{Major: 254, Minor: 1}})
	w.dev.Add("/dev/disk/by-id/ata-raid", blockdevfake.Device{Node: "/dev/sdd", Size: 4 * gib, DevNum: dm.DevNum{Major: 8, Minor: 48}, Holders: []string{"md0"}})
	for path, want := range map[string]string{
		"/dev/disk/by-id/dm-name-ssdcache--hdd-pvc--1": "is a device-mapper device",
		"/dev/disk/by-id/ata-raid":                     "is in use by md0",
	} {
		_, err := w.engine.OriginDisk(context.Background(), path)
		if !errors.Is(err, lvm.ErrDeviceInUse) || !strings.Contains(err.Error(), want) {
			t.Errorf("OriginDisk(%s) = %v, want ErrDeviceInUse saying %q", path, err, want)
		}
	}
}

// After a reboot without LVM autoactivation, staging activates the origin.
func TestStageActivatesInactiveOrigin(t *testing.T) {
	w := newWorld(t)
	w.lvm.Deactivate("ssdcache-hdd", vol)
	w.stage(t, nil)
	if indexOf(w.events, "lvm activatelv ssdcache-hdd/pvc-1") < 0 {
		t.Fatalf("origin not activated: %v", w.events)
	}
}

// The monitor sees a failure without the volume's lock; by the time it drops,
// a resize may have made a new cache, or an unstage removed the volume.
func TestDropCacheOfAChangedTableDropsNothing(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	seen := w.table(t)
	if _, err := w.engine.SetCache(context.Background(), vol, readCache(2*gib)); err != nil {
		t.Fatal(err)
	}
	resized := w.table(t)
	if err := w.engine.DropCache(context.Background(), vol, seen); !errors.Is(err, ErrCacheChanged) {
		t.Fatalf("drop after a resize: %v, want ErrCacheChanged", err)
	}
	if w.table(t).String() != resized.String() {
		t.Fatalf("the resized cache was dropped: %q", w.table(t))
	}
	if err := w.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	if err := w.engine.DropCache(context.Background(), vol, resized); !errors.Is(err, ErrCacheChanged) {
		t.Fatalf("drop after an unstage: %v, want ErrCacheChanged", err)
	}
}

// swappedOnce answers the first status read as the linear table a
// concurrent detach loaded between Inspect's reading of the table and of
// its status.
type swappedOnce struct {
	*dmfake.DM
	swapped bool
}

func (d *swappedOnce) Status(ctx context.Context, name string) (string, error) {
	if !d.swapped {
		d.swapped = true
		return "0 20971520 linear", nil
	}
	return d.DM.Status(ctx, name)
}

// Found in the e2e: kubelet's NodeGetVolumeStats failed with Internal,
// "cache status \"0 262144 linear\": want <start> <length> cache <fields>",
// when a detach ran beside it.
func TestInspectLooksAgainWhenTheTableChangesUnderIt(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	racy := &swappedOnce{DM: w.dm}
	e := NewEngine(Layers{DM: racy, LVM: w.lvm, Dev: w.dev, Metadata: w.meta, HotSets: w.hotSets, Reads: w.reads}, testPools, nil, WithBlockSectors(blockSecs))
	st, err := e.Inspect(context.Background(), vol)
	if err != nil || !racy.swapped || !st.Cached || st.Status == nil {
		t.Fatalf("Inspect = %+v, %v (status swapped: %v); want the cache's state from a second look", st, err, racy.swapped)
	}
}
