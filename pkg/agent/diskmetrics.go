package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
)

// The disk series describe each device under a staged volume, labelled with
// the volume's labels and LabelDevice: its dm device (DeviceVolume), the
// origin LV its table maps to (DeviceOrigin) and, while a cache is live, the
// cache data LV (DeviceCache). They follow node_exporter's node_disk_*
// names, so iostat's figures come out of PromQL the same way.
const (
	LabelDevice   = "device"
	DeviceVolume  = "volume"
	DeviceOrigin  = "origin"
	DeviceCache   = "cache"
	diskSubsystem = "disk"
)

// diskDevices are the values of LabelDevice.
func diskDevices() []string { return []string{DeviceVolume, DeviceOrigin, DeviceCache} }

// diskSeries are the block-layer counters of the devices under each volume.
type diskSeries struct {
	reads, readBytes, readTime, writes, writtenBytes, writeTime, ioTime, ioTimeWeighted *prometheus.CounterVec
	// ioNow is the requests in flight at the last sample.
	ioNow *prometheus.GaugeVec
}

func newDiskSeries() diskSeries {
	labels := []string{LabelVolume, LabelNamespace, LabelPVC, LabelDevice}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ssdcache", Subsystem: diskSubsystem, Name: name, Help: help}, labels)
	}
	return diskSeries{
		reads:        counter("reads_completed_total", "Read requests completed by the device (rate() gives read IOPS)."),
		readBytes:    counter("read_bytes_total", "Bytes read from the device."),
		readTime:     counter("read_time_seconds_total", "Time read requests took, summed over requests (divided by reads: average read latency)."),
		writes:       counter("writes_completed_total", "Write requests completed by the device."),
		writtenBytes: counter("written_bytes_total", "Bytes written to the device."),
		writeTime:    counter("write_time_seconds_total", "Time write requests took, summed over requests."),
		ioTime:       counter("io_time_seconds_total", "Time the device had requests in flight (rate() gives iostat's utilisation)."),
		ioTimeWeighted: counter("io_time_weighted_seconds_total",
			"Time requests spent queued and served, summed over requests (rate() gives iostat's average queue size)."),
		ioNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "ssdcache", Subsystem: diskSubsystem, Name: "io_now",
			Help: "Requests in flight on the device at the last sample."}, labels),
	}
}

func (d diskSeries) counters() []*prometheus.CounterVec {
	return []*prometheus.CounterVec{d.reads, d.readBytes, d.readTime, d.writes, d.writtenBytes, d.writeTime, d.ioTime, d.ioTimeWeighted}
}

func (d diskSeries) collectors() []prometheus.Collector {
	var cs []prometheus.Collector
	for _, c := range d.counters() {
		cs = append(cs, c)
	}
	return append(cs, d.ioNow)
}

// withDevice is l plus the device label.
func withDevice(l prometheus.Labels, device string) prometheus.Labels {
	out := prometheus.Labels{LabelDevice: device}
	for k, v := range l {
		out[k] = v
	}
	return out
}

// observeDisk adds one device's counts since prev (blockdev.IOStats.Since:
// wraps and re-created devices handled) and sets its requests in flight.
// The volume's own device also feeds the volume_*_bytes series.
func (m *Metrics) observeDisk(volumeID, device string, prev, cur blockdev.IOStats) {
	d := cur.Since(prev)
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.labels(volumeID)
	if device == DeviceVolume {
		m.readBytes.With(l).Add(float64(d.ReadBytes))
		m.writtenBytes.With(l).Add(float64(d.WriteBytes))
	}
	l = withDevice(l, device)
	const ms = 1e-3
	m.disk.reads.With(l).Add(float64(d.ReadIOs))
	m.disk.readBytes.With(l).Add(float64(d.ReadBytes))
	m.disk.readTime.With(l).Add(float64(d.ReadTicks) * ms)
	m.disk.writes.With(l).Add(float64(d.WriteIOs))
	m.disk.writtenBytes.With(l).Add(float64(d.WriteBytes))
	m.disk.writeTime.With(l).Add(float64(d.WriteTicks) * ms)
	m.disk.ioTime.With(l).Add(float64(d.IOTicks) * ms)
	m.disk.ioTimeWeighted.With(l).Add(float64(d.TimeInQueue) * ms)
	m.disk.ioNow.With(l).Set(float64(d.InFlight))
}

// forgetDisk removes the series of a device no longer under a staged
// volume (its cache detached, paused or dropped).
func (m *Metrics) forgetDisk(volumeID, device string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	match := prometheus.Labels{LabelVolume: volumeID, LabelDevice: device}
	for _, c := range m.disk.counters() {
		c.DeletePartialMatch(match)
	}
	m.disk.ioNow.DeletePartialMatch(match)
}
