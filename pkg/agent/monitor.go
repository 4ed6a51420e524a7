package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Default intervals: failures are looked for every second, so a failing SSD
// is swapped out before many reads can hit it; counters are exported every
// ten seconds.
const (
	DefaultHealthInterval = time.Second
	DefaultSampleInterval = 10 * time.Second
)

// Monitor reads the dm-cache status of every staged volume.
type Monitor struct {
	engine         *cache.Engine
	dev            blockdev.Interface
	locks          *cache.VolumeLocks
	samples        *Samples
	metrics        *Metrics
	clock          clock.WithTicker
	healthInterval time.Duration
	sampleInterval time.Duration
	// onDrop is told about a cache dropped for failing, to update its binding at once.
	onDrop func(volumeID string)

	prev map[string]*dm.CacheStatus
	// prevIO is the last reading of each device under each staged volume,
	// by volume and device role (DeviceVolume, DeviceOrigin, DeviceCache).
	prevIO      map[string]map[string]devReading
	lastSampled time.Time
	// cacheDevices are the LVs behind each cached volume's live table, read
	// from LVM once per table: LVM is asked again only when the table changes.
	cacheDevices map[string]tableDevices
	// suspendedSince is when each device was first seen suspended.
	suspendedSince map[string]time.Time
	// checks are the volumes' checks in flight (state, cache devices,
	// probe), drops their drops: one of each per volume at most, each on a
	// goroutine of its own, so that a device that never answers holds up
	// only its own volume.
	checks *volumeWork[checkResult]
	drops  *volumeWork[error]
	// failing are the volumes whose cache must be dropped, with why, until
	// a drop succeeds: those whose device did not answer within
	// ProbeTimeout. A drop that waits on such a device fails or hangs, and
	// the next ticks try again; a device that answers again meanwhile has
	// hung once and is dropped all the same (safety rule 4).
	failing map[string]failure
}

// failure is why a volume's cache is to be dropped, and the table it was
// seen failing in.
type failure struct {
	why   string
	table dm.Table
}

// ProbeTimeout is how long a cache device may take to answer the monitor's
// read of its first block (or dm-cache a status read, which waits on a
// metadata commit to it) before it counts as failed. A working SSD answers
// 4 KiB in under a millisecond, a busy one under emulation in tens; an NVMe
// command that never completes is aborted only after the driver's 30 s
// timeout and a controller reset that may itself hang (NVMe-oF retries for
// ctrl_loss_tmo, forever when unlimited). Five seconds is far above any
// answer of a working device, and short beside the reads that fail or hang
// on the cache meanwhile.
const ProbeTimeout = 5 * time.Second

// checkWait is how long a tick waits for the checks and drops it started
// before it looks at what they found. Healthy volumes answer in
// milliseconds; one still running then is left to finish on its own, and
// its result is taken at a later tick.
const checkWait = 500 * time.Millisecond

// tableDevices are the cache LV paths found for one live table.
type tableDevices struct {
	table string
	paths []string
}

// MonitorOptions configure a Monitor; zero values take the defaults.
type MonitorOptions struct {
	HealthInterval, SampleInterval time.Duration
	Clock                          clock.WithTicker
	OnDrop                         func(volumeID string)
}

// NewMonitor returns a monitor; Start runs it.
func NewMonitor(e *cache.Engine, dev blockdev.Interface, locks *cache.VolumeLocks, samples *Samples, m *Metrics, o MonitorOptions) *Monitor {
	mon := &Monitor{engine: e, dev: dev, locks: locks, samples: samples, metrics: m, clock: o.Clock,
		healthInterval: o.HealthInterval, sampleInterval: o.SampleInterval, onDrop: o.OnDrop,
		prev: map[string]*dm.CacheStatus{}, prevIO: map[string]map[string]devReading{}, cacheDevices: map[string]tableDevices{}, suspendedSince: map[string]time.Time{},
		checks: newVolumeWork[checkResult](), drops: newVolumeWork[error](), failing: map[string]failure{}}
	if mon.clock == nil {
		mon.clock = clock.RealClock{}
	}
	if mon.healthInterval <= 0 {
		mon.healthInterval = DefaultHealthInterval
	}
	if mon.sampleInterval <= 0 {
		mon.sampleInterval = DefaultSampleInterval
	}
	if mon.onDrop == nil {
		mon.onDrop = func(string) {}
	}
	return mon
}

// Start checks volumes every healthInterval, counted from the start of
// each tick as a ticker would, until ctx ends; it is a controller-runtime
// Runnable. It paces with real time: tests drive Tick with their clock.
func (m *Monitor) Start(ctx context.Context) error {
	wait.NonSlidingUntilWithContext(ctx, m.Tick, m.healthInterval)
	return nil
}

// Tick checks every staged volume once. Each volume's device reads and
// drop run on goroutines of their own (checks, drops); the tick waits
// checkWait at most for them, so a volume whose device does not answer
// delays no other volume's drop, recovery or metrics.
func (m *Monitor) Tick(ctx context.Context) {
	vols, err := m.engine.StagedVolumes(ctx)
	if err != nil {
		klog.ErrorS(err, "Listing staged volumes")
		return
	}
	now := m.clock.Now()
	sample := now.Sub(m.lastSampled) >= m.sampleInterval
	if sample {
		m.lastSampled = now
	}
	m.takeDrops()
	m.startChecks(ctx, vols, now)
	var drops []*volumeJob[error]
	cached, staged := map[string]bool{}, map[string]bool{}
	for _, v := range vols {
		staged[v.ID] = true
		m.metrics.trackVolume(v.ID)
		m.watchSuspended(ctx, v, now)
		res, answered := m.checks.take(v.ID)
		answered = answered && res.err == nil && res.state.Staged
		if sample {
			m.sampleIO(v, res.state, answered)
		}
		if answered {
			cached[v.ID] = m.check(res, sample, now)
		} else if res.err != nil {
			klog.V(2).InfoS("Reading the state of a staged volume", "volumeID", v.ID, "err", res.err)
		}
		if !answered && m.notAnswering(v.ID, now) {
			cached[v.ID] = true // keeps its series and failing mark
		}
		if j := m.dropIfFailing(ctx, v.ID, now); j != nil {
			drops = append(drops, j)
		}
	}
	waitAll(drops, checkWait)
	m.takeDrops()
	m.forgetGone(cached, staged)
}

// startChecks starts the check of every volume that has none in flight,
// and waits checkWait at most for them.
func (m *Monitor) startChecks(ctx context.Context, vols []cache.StagedVolume, now time.Time) {
	var jobs []*volumeJob[checkResult]
	for _, v := range vols {
		known := m.cacheDevices[v.ID]
		if j := m.checks.start(v.ID, now, func(j *volumeJob[checkResult]) checkResult {
			return m.checkVolume(ctx, v.ID, known, &j.progress)
		}); j != nil {
			jobs = append(jobs, j)
		}
	}
	waitAll(jobs, checkWait)
}

// forgetGone drops what the monitor keeps of volumes no longer cached or staged.
func (m *Monitor) forgetGone(cached, staged map[string]bool) {
	for id := range m.prev {
		if !cached[id] {
			m.forget(id)
		}
	}
	for id := range m.failing {
		if !cached[id] {
			delete(m.failing, id)
		}
	}
	for id := range m.suspendedSince {
		if !staged[id] {
			delete(m.suspendedSince, id)
		}
	}
	for id := range m.prevIO {
		if !staged[id] {
			delete(m.prevIO, id)
			m.metrics.forgetUnstaged(id)
		}
	}
	for _, id := range m.metrics.trackedVolumes() {
		if !staged[id] {
			m.metrics.forgetUnstaged(id)
		}
	}
	isStaged := func(id string) bool { return staged[id] }
	m.checks.forget(isStaged)
	m.drops.forget(isStaged)
}

// devReading is one device's counters at a sample.
type devReading struct {
	num   dm.DevNum
	stats blockdev.IOStats
}

// volumeDevices are the devices to sample under a volume, by role: its dm
// device and, from the live table the tick already read (no LVM command),
// the origin it maps to and the cache data device of a live cache. known is
// false when the tick has no table for the volume.
func volumeDevices(v cache.StagedVolume, st cache.State, known bool) map[string]dm.DevNum {
	devs := map[string]dm.DevNum{DeviceVolume: v.DevNum}
	if !known {
		return devs
	}
	switch t := st.Table.Target.(type) {
	case dm.CacheTarget:
		devs[DeviceOrigin], devs[DeviceCache] = t.Origin, t.Data
	case dm.LinearTarget:
		devs[DeviceOrigin] = t.Device
	}
	return devs
}

// sampleIO adds what each device under a volume did since the last sample.
// A device seen for the first time, or under a new number (a cache
// re-created on another LV), only sets the baseline; a device the table no
// longer maps to loses its series.
func (m *Monitor) sampleIO(v cache.StagedVolume, st cache.State, known bool) {
	devs := volumeDevices(v, st, known)
	prev := m.prevIO[v.ID]
	if prev == nil {
		prev = map[string]devReading{}
	}
	for role, num := range devs {
		cur, err := m.dev.IOStats(num)
		if err != nil {
			klog.V(2).InfoS("Reading I/O counters", "volumeID", v.ID, "device", role, "devNum", num, "err", err)
			continue
		}
		if p, ok := prev[role]; ok && p.num == num {
			m.metrics.observeDisk(v.ID, role, p.stats, cur)
		} else {
			m.metrics.trackDisk(v.ID, role)
		}
		prev[role] = devReading{num: num, stats: cur}
	}
	if known {
		for role := range prev {
			if _, ok := devs[role]; !ok {
				delete(prev, role)
				m.metrics.forgetDisk(v.ID, role)
			}
		}
	}
	if len(prev) > 0 {
		m.prevIO[v.ID] = prev
	}
}

// checkResult is what one volume's check found.
type checkResult struct {
	state cache.State
	// devices are the cache LVs of state's table (zero if not looked up).
	devices tableDevices
	// probeErr is the failed read of a cache device.
	probeErr error
	err      error
}

// checkVolume reads a volume's table and dm-cache status and reads from the
// devices of a usable cache (checkVolume's job), telling p which device
// read it waits on: the tick counts a read that waits ProbeTimeout as a
// failure. known are the cache devices found for the last table.
func (m *Monitor) checkVolume(ctx context.Context, id string, known tableDevices, p *progress) checkResult {
	// The table alone never waits on the cache: read first, it is what a
	// drop of a status read that hangs compares the live table with.
	if table, staged, err := m.engine.LiveTable(ctx, id); err != nil || !staged {
		return checkResult{state: cache.State{VolumeID: id}, err: err}
	} else {
		p.sawTable(table)
	}
	p.reading("a status read", m.clock.Now())
	st, err := m.engine.HealthOf(ctx, id)
	p.answered()
	if err != nil || st.Status == nil {
		return checkResult{state: st, err: err}
	}
	p.sawTable(st.Table)
	if !st.Status.Usable() {
		return checkResult{state: st}
	}
	devices, err := m.cacheDevicesOf(ctx, st, known)
	if err != nil || devices.paths == nil {
		return checkResult{state: st, devices: devices} // the next check looks again; a read error is what drops
	}
	st.CacheDevices = devices.paths
	p.reading("a read", m.clock.Now())
	defer p.answered()
	return checkResult{state: st, devices: devices, probeErr: m.engine.ProbeCacheDevices(st)}
}

// cacheDevicesOf returns the LVs behind a volume's cache, asking LVM only
// when the live table is not the one known. No paths: the volume was
// unstaged or uncached since its state was read.
func (m *Monitor) cacheDevicesOf(ctx context.Context, st cache.State, known tableDevices) (tableDevices, error) {
	if known.paths != nil && known.table == st.Table.String() {
		return known, nil
	}
	full, err := m.engine.Inspect(ctx, st.VolumeID)
	if err != nil {
		klog.ErrorS(err, "Finding the cache devices", "volumeID", st.VolumeID)
		return tableDevices{}, err
	}
	if !full.Cached {
		return tableDevices{}, nil
	}
	return tableDevices{table: full.Table.String(), paths: full.CacheDevices}, nil
}

// check looks at what one volume's check found and reports whether it is
// cached: a cache dm-cache reports failed, or whose device failed a read,
// is to be dropped.
func (m *Monitor) check(res checkResult, sample bool, now time.Time) bool {
	st := res.state
	id := st.VolumeID
	if st.Status == nil {
		return false // uncached, or unstaged since it was listed
	}
	if res.devices.paths != nil {
		m.cacheDevices[id] = res.devices
	}
	switch {
	case !st.Status.Usable():
		m.failing[id] = failure{why: "dm-cache reported " + string(st.Status.Health), table: st.Table}
	case res.probeErr != nil:
		m.failing[id] = failure{why: "the cache device failed a read: " + res.probeErr.Error(), table: st.Table}
	}
	if sample || !st.Status.Usable() {
		m.metrics.observe(id, m.prev[id], *st.Status)
		m.samples.put(id, Sample{Status: *st.Status, Time: now})
		m.prev[id] = st.Status
	}
	return true
}

// notAnswering looks at a volume whose check has not answered: one waiting
// ProbeTimeout on a read of its cache is failing, and is reported so at
// once (the binding Degraded, the healthy gauge 0) while its drop, which
// waits on the same device, is tried. It reports whether the volume is
// cached as far as the monitor knows.
func (m *Monitor) notAnswering(id string, now time.Time) bool {
	_, known := m.cacheDevices[id]
	_, failing := m.failing[id]
	j, running := m.checks.inFlight(id)
	if !running {
		return known || failing
	}
	since, what, table, tableRead, waiting := j.progress.waiting()
	if !waiting || now.Sub(since) < ProbeTimeout || !tableRead {
		return known || failing
	}
	why := fmt.Sprintf("the cache device did not answer %s within %s", what, ProbeTimeout)
	if !failing {
		klog.ErrorS(nil, "The cache device does not answer; dropping the cache", "volumeID", id, "read", what, "waiting", now.Sub(since))
		m.metrics.observe(id, m.prev[id], dm.CacheStatus{Failed: true})
		m.samples.markDropped(id, why)
		m.onDrop(id)
	}
	m.failing[id] = failure{why: why, table: table}
	return true
}

// dropIfFailing starts the drop of a failing volume's cache, unless one is
// in flight, and returns it.
func (m *Monitor) dropIfFailing(ctx context.Context, id string, now time.Time) *volumeJob[error] {
	f, failing := m.failing[id]
	if !failing {
		return nil
	}
	return m.drops.start(id, now, func(*volumeJob[error]) error { return m.drop(ctx, id, f.table, f.why) })
}

// takeDrops forgets the failures whose drop finished: done, or moot (the
// cache was replaced or unstaged meanwhile; a new one gets checked anew).
// A drop that failed (the device hung, the volume busy) is tried again.
func (m *Monitor) takeDrops() {
	for id := range m.failing {
		if err, done := m.drops.take(id); done && (err == nil || errors.Is(err, cache.ErrCacheChanged)) {
			delete(m.failing, id)
		}
	}
}

// LeftSuspendedAfter is how long a device must stay suspended, with its
// volume lock free, before the monitor takes it as left behind. A reload
// keeps a device suspended for well under a second; the wait spares a
// change made by another process (an operator's dmsetup, a test's engine),
// which the lock does not cover.
const LeftSuspendedAfter = time.Minute

// watchSuspended tracks how long each device has been suspended and rolls
// back one left so for LeftSuspendedAfter.
func (m *Monitor) watchSuspended(ctx context.Context, v cache.StagedVolume, now time.Time) {
	if !v.Suspended {
		delete(m.suspendedSince, v.ID)
		return
	}
	since, seen := m.suspendedSince[v.ID]
	if !seen {
		m.suspendedSince[v.ID] = now
		return
	}
	if now.Sub(since) >= LeftSuspendedAfter && m.resumeLeftSuspended(ctx, v.ID) {
		delete(m.suspendedSince, v.ID)
	}
}

// resumeLeftSuspended rolls back a reload that no one is doing any more: a
// suspended device whose volume lock is free was left so by a change cut
// short (a process killed between suspend and resume, a rollback that
// failed), and would hold the application's I/O until a CSI call or binding
// touched the volume again.
// It reports whether the device was resumed.
func (m *Monitor) resumeLeftSuspended(ctx context.Context, id string) bool {
	if !m.locks.TryAcquire(id) {
		return false // a change is in flight: its suspend is expected
	}
	defer m.locks.Release(id)
	if err := m.engine.RecoverInterruptedReload(ctx, id); err != nil {
		klog.ErrorS(err, "Resuming a device left suspended", "volumeID", id)
		return false
	}
	klog.InfoS("Resumed a device left suspended by an interrupted change", "volumeID", id)
	return true
}

// drop replaces a failing cache with a linear table (safety rule 4), on
// the drops goroutine of its volume. The failure was seen in seen without
// the volume's lock: a change that took the lock since may have replaced or
// removed that cache, which is then not dropped (ErrCacheChanged; the next
// check looks at the new one). The drop holds the volume's lock for as
// long as DropCache waits on the device: the device is suspending, and any
// other change of it would wait behind that suspend.
func (m *Monitor) drop(ctx context.Context, id string, seen dm.Table, why string) error {
	if !m.locks.TryAcquire(id) {
		// Busy; a promotion stops copying into the cache, and the next tick tries again.
		m.locks.Yield(id)
		return errVolumeBusy
	}
	defer m.locks.Release(id)
	err := m.engine.DropCache(ctx, id, seen)
	if errors.Is(err, cache.ErrCacheChanged) {
		klog.V(2).InfoS("Not dropping a cache changed since it was seen failing", "volumeID", id, "why", why, "err", err)
		return err
	}
	if err != nil {
		klog.ErrorS(err, "Dropping failing cache; trying again at the next tick", "volumeID", id, "why", why)
		return err
	}
	m.CacheLost(id, why)
	return nil
}

// errVolumeBusy: another change holds the volume's lock.
var errVolumeBusy = errors.New("the volume is busy")

// CacheLost records that a volume's cache stopped serving because its device
// failed, whoever swapped it out (a drop, or a promotion that could not load
// it back): a log line, the drop counter, the binding's status, at once.
// Safe to call from another goroutine.
func (m *Monitor) CacheLost(id, why string) {
	klog.InfoS("Dropped failing cache; the volume serves from its origin", "volumeID", id, "why", why)
	m.metrics.add(m.metrics.drops, id, 1)
	m.samples.markDropped(id, why)
	m.onDrop(id)
}

func (m *Monitor) forget(id string) {
	delete(m.prev, id)
	delete(m.cacheDevices, id)
	m.samples.forget(id)
	m.metrics.forget(id)
}
