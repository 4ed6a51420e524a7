package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Metrics are the per-volume dm-cache series and the volumes' transfer
// counters. Counters are built from deltas of the kernel's counters (32-bit
// for dm-cache), so they survive wraps and remain monotonic when a cache or
// device is re-created.
type Metrics struct {
	readBytes, writtenBytes                                             *prometheus.CounterVec
	readHits, readMisses, writeHits, writeMisses, promotions, demotions *prometheus.CounterVec
	usedBlocks, totalBlocks, blockBytes, dirtyBlocks, healthy           *prometheus.GaugeVec
	drops, batchPromoted                                                *prometheus.CounterVec
	poolUp                                                              prometheus.Gauge
	poolSize, poolFree                                                  *prometheus.GaugeVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ssdcache", Subsystem: "cache", Name: name, Help: help}, []string{"volume"})
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "cache", Name: name, Help: help}, []string{"volume"})
	}
	m := &Metrics{
		readHits:    counter("read_hits_total", "Reads served from the cache device."),
		readMisses:  counter("read_misses_total", "Reads served from the origin."),
		writeHits:   counter("write_hits_total", "Writes to blocks that were cached (written to both devices)."),
		writeMisses: counter("write_misses_total", "Writes to blocks that were not cached."),
		promotions:  counter("promotions_total", "Blocks copied from the origin into the cache."),
		demotions:   counter("demotions_total", "Blocks evicted from the cache."),
		usedBlocks:  gauge("used_blocks", "Cache blocks holding data."),
		totalBlocks: gauge("total_blocks", "Cache blocks of the cache device."),
		blockBytes:  gauge("block_size_bytes", "Size of one cache block."),
		dirtyBlocks: gauge("dirty_blocks", "Blocks the cache considers dirty; always 0 in writethrough."),
		healthy:     gauge("healthy", "1 while the cache is usable, 0 once dm-cache reported a failure."),
		drops:       counter("drops_total", "Caches dropped to a linear table because their device failed."),
		batchPromoted: counter("batch_promoted_blocks_total",
			"Blocks ssdcache copied into the cache in batches of recently read ones, beside dm-cache's own promotions."),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ssdcache", Subsystem: "volume", Name: "read_bytes_total",
			Help: "Bytes read from the volume's device, cached or not (rate() gives read throughput)."}, []string{"volume"}),
		writtenBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ssdcache", Subsystem: "volume", Name: "written_bytes_total",
			Help: "Bytes written to the volume's device."}, []string{"volume"}),
		poolUp: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ssdcache", Name: "cache_pool_up",
			Help: "1 when the last LVM scan found the node's cache volume group, 0 when the node runs without cache."}),
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "pool", Name: "size_bytes",
			Help: "Size of a pool's volume group at the last LVM scan; pool is origin or cache, class the cache device class."}, []string{"pool", "vg", "class"}),
		poolFree: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: "pool", Name: "free_bytes",
			Help: "Unallocated bytes of a pool's volume group at the last LVM scan."}, []string{"pool", "vg", "class"}),
	}
	for _, c := range []prometheus.Collector{m.readHits, m.readMisses, m.writeHits, m.writeMisses, m.promotions,
		m.demotions, m.usedBlocks, m.totalBlocks, m.blockBytes, m.dirtyBlocks, m.healthy, m.drops, m.batchPromoted, m.readBytes, m.writtenBytes,
		m.poolUp, m.poolSize, m.poolFree} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
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

// observe adds the counter deltas between prev and cur and sets the gauges.
func (m *Metrics) observe(volumeID string, prev *dm.CacheStatus, cur dm.CacheStatus) {
	if cur.Failed {
		m.healthy.WithLabelValues(volumeID).Set(0)
		return
	}
	if prev != nil && !prev.Failed {
		add := func(c *prometheus.CounterVec, p, n uint64) {
			c.WithLabelValues(volumeID).Add(float64(dm.Delta32(p, n)))
		}
		add(m.readHits, prev.ReadHits, cur.ReadHits)
		add(m.readMisses, prev.ReadMisses, cur.ReadMisses)
		add(m.writeHits, prev.WriteHits, cur.WriteHits)
		add(m.writeMisses, prev.WriteMisses, cur.WriteMisses)
		add(m.promotions, prev.Promotions, cur.Promotions)
		add(m.demotions, prev.Demotions, cur.Demotions)
	}
	m.usedBlocks.WithLabelValues(volumeID).Set(float64(cur.CacheUsed))
	m.totalBlocks.WithLabelValues(volumeID).Set(float64(cur.CacheTotal))
	m.blockBytes.WithLabelValues(volumeID).Set(float64(cur.BlockSectors * dm.SectorSize))
	m.dirtyBlocks.WithLabelValues(volumeID).Set(float64(cur.Dirty))
	if cur.Usable() {
		m.healthy.WithLabelValues(volumeID).Set(1)
	} else {
		m.healthy.WithLabelValues(volumeID).Set(0)
	}
}

// forget removes the series of a volume that is no longer cached here.
func (m *Metrics) forget(volumeID string) {
	for _, v := range []*prometheus.CounterVec{m.readHits, m.readMisses, m.writeHits, m.writeMisses, m.promotions, m.demotions, m.batchPromoted} {
		v.DeleteLabelValues(volumeID)
	}
	for _, v := range []*prometheus.GaugeVec{m.usedBlocks, m.totalBlocks, m.blockBytes, m.dirtyBlocks, m.healthy} {
		v.DeleteLabelValues(volumeID)
	}
}

// observeIO adds the transfer since prev; a device re-created since then
// (counters lower than before) counts from zero.
func (m *Metrics) observeIO(volumeID string, prev, cur blockdev.IOStats) {
	delta := func(p, c uint64) float64 {
		if c < p {
			return float64(c)
		}
		return float64(c - p)
	}
	m.readBytes.WithLabelValues(volumeID).Add(delta(prev.ReadBytes, cur.ReadBytes))
	m.writtenBytes.WithLabelValues(volumeID).Add(delta(prev.WriteBytes, cur.WriteBytes))
}

func (m *Metrics) forgetIO(volumeID string) {
	m.readBytes.DeleteLabelValues(volumeID)
	m.writtenBytes.DeleteLabelValues(volumeID)
}
