package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Labels of every per-volume series: the volume (the PV's name, as before)
// and the PVC it belongs to, named as kubelet's volume stats name them so
// the two join. One series per volume: the PVC is a property of the volume.
const (
	LabelVolume    = "volume"
	LabelNamespace = "namespace"
	LabelPVC       = "persistentvolumeclaim"
)

// LabelNode is the node's name on every series the node plugin registers
// (the caller wraps the registerer given to NewMetrics with it, see
// cmd/ssdcache-node): the alerts and the dashboard name and filter by node
// from the series themselves, however Prometheus scrapes them (the chart's
// ServiceMonitor, another scrape config, make bench's scrape log), as
// TopoLVM's node metrics do. The controller's per-binding series carry the
// same label for the binding's node.
const LabelNode = "node"

// VolumeOwner is the PVC a volume belongs to, as far as this node knows:
// from the volume context NodeStage received (csi-provisioner's
// --extra-create-metadata) or from the volume's CacheBinding.
type VolumeOwner struct {
	Namespace, PVC string
}

// Metrics are the per-volume dm-cache series, the volumes' transfer counters,
// the block-layer counters of the devices under each volume and the pools'
// sizes. Counters are built from deltas of the kernel's counters (32-bit for
// dm-cache and for the block layer's times), so they survive wraps and remain
// monotonic when a cache or device is re-created.
type Metrics struct {
	readBytes, writtenBytes                                             *prometheus.CounterVec
	readHits, readMisses, writeHits, writeMisses, promotions, demotions *prometheus.CounterVec
	usedBlocks, totalBlocks, blockBytes, dirtyBlocks, healthy           *prometheus.GaugeVec
	drops, batchPromoted, preloaded                                     *prometheus.CounterVec
	poolUp                                                              prometheus.Gauge
	nodePoolReady                                                       *prometheus.GaugeVec
	poolSize, poolFree                                                  *prometheus.GaugeVec
	disk                                                                diskSeries

	// mu orders every per-volume write with SetOwner's relabelling, so no
	// write lands on a volume's old labels after they were replaced.
	mu     sync.Mutex
	owners map[string]VolumeOwner
	// tracked are the staged volumes whose counters trackVolume created, so
	// that they go at unstage (forgetUnstaged) even if no I/O sample was read.
	tracked map[string]bool
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	volumeLabels := []string{LabelVolume, LabelNamespace, LabelPVC}
	counter := func(subsystem, name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ssdcache", Subsystem: subsystem, Name: name, Help: help}, volumeLabels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "cache", Name: name, Help: help}, volumeLabels)
	}
	pool := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "pool", Name: name, Help: help}, []string{"pool", "vg", "device_class"})
	}
	m := &Metrics{
		readHits:    counter("cache", "read_hits_total", "Reads served from the cache device."),
		readMisses:  counter("cache", "read_misses_total", "Reads served from the origin."),
		writeHits:   counter("cache", "write_hits_total", "Writes to blocks that were cached (written to both devices)."),
		writeMisses: counter("cache", "write_misses_total", "Writes to blocks that were not cached."),
		promotions:  counter("cache", "promotions_total", "Blocks copied from the origin into the cache."),
		demotions:   counter("cache", "demotions_total", "Blocks evicted from the cache."),
		usedBlocks:  gauge("used_blocks", "Cache blocks holding data."),
		totalBlocks: gauge("total_blocks", "Cache blocks of the cache device."),
		blockBytes:  gauge("block_size_bytes", "Size of one cache block."),
		dirtyBlocks: gauge("dirty_blocks", "Blocks the cache considers dirty; always 0 in writethrough."),
		healthy:     gauge("healthy", "1 while the cache is usable, 0 once dm-cache reported a failure (Fail, needs_check, read-only metadata)."),
		drops:       counter("cache", "drops_total", "Caches dropped to a linear table because their device failed."),
		batchPromoted: counter("cache", "batch_promoted_blocks_total",
			"Blocks ssdcache copied into the cache in batches of recently read ones, beside dm-cache's own promotions."),
		preloaded: counter("cache", "preloaded_blocks_total",
			"Blocks ssdcache copied into the cache for a CacheBinding's spec.preloadPaths."),
		readBytes:    counter("volume", "read_bytes_total", "Bytes read from the volume's device, cached or not (rate() gives read throughput)."),
		writtenBytes: counter("volume", "written_bytes_total", "Bytes written to the volume's device."),
		poolUp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ssdcache", Name: "cache_pool_up",
			Help: "1 when the last LVM scan found the node's cache volume group, 0 when the node runs without cache."}),
		nodePoolReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "node", Name: "pool_ready",
			Help: "1 once the node's pool (origin or cache) is set up on its devices, 0 while they are missing or refused (retried)."}, []string{"pool"}),
		poolSize: pool("size_bytes", "Size of a pool's volume group at the last LVM scan; pool is origin or cache, device_class the cache device class."),
		poolFree: pool("free_bytes", "Unallocated bytes of a pool's volume group at the last LVM scan."),
		disk:     newDiskSeries(),
		owners:   map[string]VolumeOwner{},
		tracked:  map[string]bool{},
	}
	for _, c := range append([]prometheus.Collector{m.readHits, m.readMisses, m.writeHits, m.writeMisses, m.promotions,
		m.demotions, m.usedBlocks, m.totalBlocks, m.blockBytes, m.dirtyBlocks, m.healthy, m.drops, m.batchPromoted, m.preloaded, m.readBytes, m.writtenBytes,
		m.poolUp, m.nodePoolReady, m.poolSize, m.poolFree}, m.disk.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) volumeCounters() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.readHits, m.readMisses, m.writeHits, m.writeMisses, m.promotions, m.demotions,
		m.drops, m.batchPromoted, m.preloaded, m.readBytes, m.writtenBytes}
}

func (m *Metrics) volumeGauges() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.usedBlocks, m.totalBlocks, m.blockBytes, m.dirtyBlocks, m.healthy}
}

// labels are volumeID's series labels; the caller holds m.mu.
func (m *Metrics) labels(volumeID string) prometheus.Labels {
	o := m.owners[volumeID]
	return prometheus.Labels{LabelVolume: volumeID, LabelNamespace: o.Namespace, LabelPVC: o.PVC}
}

// SetOwner records the PVC of volumeID. Series already written under other
// labels (an empty owner, for a volume sampled before its binding was read
// after a restart) move to the new ones: counters carry their value over, so
// rate() and increase() see no reset, and gauges are set again by the next
// sample.
func (m *Metrics) SetOwner(volumeID string, o VolumeOwner) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.owners[volumeID]; ok && old == o {
		return
	}
	before := m.labels(volumeID)
	m.owners[volumeID] = o
	after := m.labels(volumeID)
	for _, v := range m.volumeCounters() {
		moveCounter(v, before, after)
	}
	for _, v := range m.disk.counters() {
		for _, dev := range diskDevices() {
			moveCounter(v, withDevice(before, dev), withDevice(after, dev))
		}
	}
	for _, v := range m.volumeGauges() {
		v.Delete(before)
	}
	m.disk.ioNow.DeletePartialMatch(before)
}

// moveCounter carries a counter's value from the series labelled before, if
// there is one, to the one labelled after; a series at 0 moves too, so the
// new one also starts at 0 (see trackVolume).
func moveCounter(v *prometheus.CounterVec, before, after prometheus.Labels) {
	value, ok := counterValue(v, before)
	if !ok {
		return
	}
	v.With(after).Add(value)
	v.Delete(before)
}

// counterValue is the value of v's series labelled exactly l; ok is false
// when v has no such series. Unlike GetMetricWith it creates none.
func counterValue(v *prometheus.CounterVec, l prometheus.Labels) (value float64, ok bool) {
	ch := make(chan prometheus.Metric)
	go func() { v.Collect(ch); close(ch) }()
	for c := range ch {
		var d dto.Metric
		if ok || c.Write(&d) != nil || len(d.GetLabel()) != len(l) {
			continue // drain the channel
		}
		same := true
		for _, p := range d.GetLabel() {
			if want, has := l[p.GetName()]; !has || want != p.GetValue() {
				same = false
			}
		}
		if same {
			value, ok = d.GetCounter().GetValue(), true
		}
	}
	return value, ok
}

// zero creates each of cs's series labelled l at 0, leaving any that exists
// as it is. A counter must exist at 0 before its first increment: a series
// that Prometheus first scrapes at 1 has no increase() (no earlier sample to
// rise from), so an alert on increase(ssdcache_cache_drops_total[10m]) would
// miss a volume's first drop. The caller holds m.mu.
func zero(l prometheus.Labels, cs ...*prometheus.CounterVec) {
	for _, c := range cs {
		c.With(l).Add(0)
	}
}

// cacheCounters are the per-volume counters of a live cache, which go with
// it (forget).
func (m *Metrics) cacheCounters() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{m.readHits, m.readMisses, m.writeHits, m.writeMisses, m.promotions, m.demotions,
		m.batchPromoted, m.preloaded}
}

// trackVolume creates the counters of a staged volume at 0: drops_total,
// which a cache failure adds to, and the volume's byte counters (written
// from the second I/O sample on). The monitor calls it for every staged
// volume on every tick; an existing series is left as it is.
func (m *Metrics) trackVolume(volumeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	zero(m.labels(volumeID), m.drops, m.readBytes, m.writtenBytes)
	m.tracked[volumeID] = true
}

// trackedVolumes are the volumes trackVolume was called for since their
// last forgetUnstaged.
func (m *Metrics) trackedVolumes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.tracked))
	for id := range m.tracked {
		out = append(out, id)
	}
	return out
}

// Owner is the PVC volumeID's series are labelled with; ok is false while
// the node does not know it.
func (m *Metrics) Owner(volumeID string) (o VolumeOwner, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok = m.owners[volumeID]
	return o, ok
}

// add adds n to volumeID's series of c.
func (m *Metrics) add(c *prometheus.CounterVec, volumeID string, n float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c.With(m.labels(volumeID)).Add(n)
}

// PoolBytes is one configured volume group as a pool scan read it.
type PoolBytes struct {
	// Pool is "origin" or "cache"; Class is the cache device class ("" for the origin).
	Pool, VG, Class string
	// Found is false when the scan did not find the volume group.
	Found      bool
	Size, Free uint64
}

// SetPools records the pools' sizes; a volume group the scan did not find
// has no series, rather than a size of 0 that would read as a full pool.
func (m *Metrics) SetPools(pools []PoolBytes) {
	for _, p := range pools {
		if !p.Found {
			m.poolSize.DeleteLabelValues(p.Pool, p.VG, p.Class)
			m.poolFree.DeleteLabelValues(p.Pool, p.VG, p.Class)
			continue
		}
		m.poolSize.WithLabelValues(p.Pool, p.VG, p.Class).Set(float64(p.Size))
		m.poolFree.WithLabelValues(p.Pool, p.VG, p.Class).Set(float64(p.Free))
	}
}

// SetPoolUp records whether the cache pool is usable.
func (m *Metrics) SetPoolUp(up bool) {
	if up {
		m.poolUp.Set(1)
	} else {
		m.poolUp.Set(0)
	}
}

// SetNodePoolReady records whether the pool of role (PoolOrigin, PoolCache) is set up.
func (m *Metrics) SetNodePoolReady(role string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.nodePoolReady.WithLabelValues(role).Set(v)
}

// trackDisk creates the counters of a device under a staged volume at 0,
// at the sample that only sets its baseline (observeDisk adds from the next).
func (m *Metrics) trackDisk(volumeID, device string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	zero(withDevice(m.labels(volumeID), device), m.disk.counters()...)
}

// observe adds the counter deltas between prev and cur and sets the gauges.
func (m *Metrics) observe(volumeID string, prev *dm.CacheStatus, cur dm.CacheStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.labels(volumeID)
	// The cache's counters exist at 0 from its first sample, which only sets
	// the baseline of the deltas.
	zero(l, m.cacheCounters()...)
	if cur.Failed {
		m.healthy.With(l).Set(0)
		return
	}
	if prev != nil && !prev.Failed {
		add := func(c *prometheus.CounterVec, p, n uint64) {
			c.With(l).Add(float64(dm.Delta32(p, n)))
		}
		add(m.readHits, prev.ReadHits, cur.ReadHits)
		add(m.readMisses, prev.ReadMisses, cur.ReadMisses)
		add(m.writeHits, prev.WriteHits, cur.WriteHits)
		add(m.writeMisses, prev.WriteMisses, cur.WriteMisses)
		add(m.promotions, prev.Promotions, cur.Promotions)
		add(m.demotions, prev.Demotions, cur.Demotions)
	}
	m.usedBlocks.With(l).Set(float64(cur.CacheUsed))
	m.totalBlocks.With(l).Set(float64(cur.CacheTotal))
	m.blockBytes.With(l).Set(float64(cur.BlockSectors * dm.SectorSize))
	m.dirtyBlocks.With(l).Set(float64(cur.Dirty))
	if cur.Usable() {
		m.healthy.With(l).Set(1)
	} else {
		m.healthy.With(l).Set(0)
	}
}

// forget removes the cache series of a volume that is no longer cached
// here; drops_total stays, so that increase() still sees the drop.
func (m *Metrics) forget(volumeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.labels(volumeID)
	for _, v := range m.cacheCounters() {
		v.Delete(l)
	}
	for _, v := range m.volumeGauges() {
		v.Delete(l)
	}
}

// forgetUnstaged removes the series and the owner of a volume no longer
// staged here, except drops_total: a drop shortly before an unstage must
// still show in increase().
func (m *Metrics) forgetUnstaged(volumeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.volumeCounters() {
		if v != m.drops {
			v.DeletePartialMatch(prometheus.Labels{LabelVolume: volumeID})
		}
	}
	for _, v := range m.volumeGauges() {
		v.DeletePartialMatch(prometheus.Labels{LabelVolume: volumeID})
	}
	for _, v := range m.disk.counters() {
		v.DeletePartialMatch(prometheus.Labels{LabelVolume: volumeID})
	}
	m.disk.ioNow.DeletePartialMatch(prometheus.Labels{LabelVolume: volumeID})
	delete(m.owners, volumeID)
	delete(m.tracked, volumeID)
}
