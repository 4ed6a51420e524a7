package agent

import (
	"context"
	"errors"
	"time"

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
}

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
		prev: map[string]*dm.CacheStatus{}, prevIO: map[string]map[string]devReading{}, cacheDevices: map[string]tableDevices{}, suspendedSince: map[string]time.Time{}}
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

// Start checks volumes until ctx ends; it is a controller-runtime Runnable.
func (m *Monitor) Start(ctx context.Context) error {
	ticker := m.clock.NewTicker(m.healthInterval)
	defer ticker.Stop()
	for {
		m.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Tick checks every staged volume once.
func (m *Monitor) Tick(ctx context.Context) {
	vols, err := m.engine.StagedVolumes(ctx)
	if err != nil {
		klog.ErrorS(err, "Listing staged volumes")
		return
	}
	states, err := m.engine.Health(ctx)
	if err != nil {
		klog.ErrorS(err, "Reading the state of staged volumes")
		return
	}
	now := m.clock.Now()
	sample := now.Sub(m.lastSampled) >= m.sampleInterval
	if sample {
		m.lastSampled = now
	}
	cached, staged := map[string]bool{}, map[string]bool{}
	for _, v := range vols {
		staged[v.ID] = true
		m.metrics.trackVolume(v.ID)
		m.watchSuspended(ctx, v, now)
		st, known := states[v.ID]
		if sample {
			m.sampleIO(v, st, known)
		}
		if known && m.check(ctx, st, sample, now) {
			cached[v.ID] = true
		}
	}
	for id := range m.prev {
		if !cached[id] {
			m.forget(id)
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

// check looks at one volume's state and reports whether it is cached.
func (m *Monitor) check(ctx context.Context, st cache.State, sample bool, now time.Time) bool {
	id := st.VolumeID
	if st.Status == nil {
		return false // uncached, or unstaged since it was listed
	}
	if !st.Status.Usable() {
		m.drop(ctx, id, st.Table, "dm-cache reported "+string(st.Status.Health))
	} else if err := m.probeCache(ctx, st); err != nil {
		m.drop(ctx, id, st.Table, "the cache device failed a read: "+err.Error())
	}
	if sample || !st.Status.Usable() {
		m.metrics.observe(id, m.prev[id], *st.Status)
		m.samples.put(id, Sample{Status: *st.Status, Time: now})
		m.prev[id] = st.Status
	}
	return true
}

// probeCache reads from the devices of a volume's cache, asking LVM which
// they are only when the live table is new to the monitor.
func (m *Monitor) probeCache(ctx context.Context, st cache.State) error {
	known, ok := m.cacheDevices[st.VolumeID]
	if !ok || known.table != st.Table.String() {
		full, err := m.engine.Inspect(ctx, st.VolumeID)
		if err != nil {
			klog.ErrorS(err, "Finding the cache devices", "volumeID", st.VolumeID)
			return nil // the next tick asks again; a read error is what drops
		}
		if !full.Cached {
			return nil // unstaged or uncached since the tick read its state
		}
		known = tableDevices{table: full.Table.String(), paths: full.CacheDevices}
		m.cacheDevices[st.VolumeID] = known
	}
	st.CacheDevices = known.paths
	return m.engine.ProbeCacheDevices(st)
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

// drop replaces a failing cache with a linear table (safety rule 4). The
// failure was seen in seen without the volume's lock: a change that took
// the lock since may have replaced or removed that cache, which is then not
// dropped (the next tick looks at the new one).
func (m *Monitor) drop(ctx context.Context, id string, seen dm.Table, why string) {
	if !m.locks.TryAcquire(id) {
		// Busy; a promotion stops copying into the cache, and the next tick tries again.
		m.locks.Yield(id)
		return
	}
	defer m.locks.Release(id)
	err := m.engine.DropCache(ctx, id, seen)
	if errors.Is(err, cache.ErrCacheChanged) {
		klog.V(2).InfoS("Not dropping a cache changed since it was seen failing", "volumeID", id, "why", why, "err", err)
		return
	}
	if err != nil {
		klog.ErrorS(err, "Dropping failing cache", "volumeID", id, "why", why)
		return
	}
	m.CacheLost(id, why)
}

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
