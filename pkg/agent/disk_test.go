package agent

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// liveCache is the cache target of the volume's live table.
func (n *fakeNode) liveCache(t *testing.T) dm.CacheTarget {
	t.Helper()
	tbl, err := n.dm.Table(context.Background(), cache.DeviceName(vol))
	if err != nil {
		t.Fatal(err)
	}
	ct, ok := tbl.Target.(dm.CacheTarget)
	if !ok {
		t.Fatalf("live table %q is not a cache", tbl)
	}
	return ct
}

func (n *fakeNode) sampleTick() {
	n.clock.Step(DefaultSampleInterval)
	n.monitor.Tick(context.Background())
}

func (n *fakeNode) disk(c *prometheus.CounterVec, device string) float64 {
	return testutil.ToFloat64(c.With(withDevice(n.metrics.labels(vol), device)))
}

// diskSeriesOf counts the disk series of device.
func diskSeriesOf(t *testing.T, n *fakeNode, device string) int {
	t.Helper()
	count := 0
	for _, c := range n.metrics.disk.collectors() {
		ch := make(chan prometheus.Metric, 16)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var pb dto.Metric
			if err := m.Write(&pb); err != nil {
				t.Fatal(err)
			}
			for _, l := range pb.GetLabel() {
				if l.GetName() == LabelDevice && l.GetValue() == device {
					count++
				}
			}
		}
	}
	return count
}

// The devices under a cached volume get iostat's counters, from deltas of
// the block layer's: the origin's 32-bit io_ticks wrap between the samples.
func TestDiskCountersForTheVolumeItsOriginAndItsCache(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	ct := n.liveCache(t)
	volNum := dm.DevNum{Major: 253, Minor: 1}
	n.dev.Stats[volNum] = blockdev.IOStats{ReadIOs: 100, ReadBytes: 1 << 20, ReadTicks: 500}
	n.dev.Stats[ct.Origin] = blockdev.IOStats{ReadIOs: 80, ReadBytes: 1 << 20, ReadTicks: 2000, IOTicks: 1<<32 - 1000, TimeInQueue: 4000}
	n.dev.Stats[ct.Data] = blockdev.IOStats{ReadIOs: 20, WriteIOs: 5, WriteBytes: 1 << 16, IOTicks: 10}
	n.monitor.Tick(context.Background())
	// The first sample only sets the baseline: the counters exist at 0 (so
	// that increase() counts the first delta), the requests in flight not yet.
	if got, want := diskSeriesOf(t, n, DeviceOrigin), len(n.metrics.disk.counters()); got != want {
		t.Fatalf("%d origin series after the first sample, want its %d counters at 0", got, want)
	}
	for _, c := range n.metrics.disk.counters() {
		if got := n.disk(c, DeviceOrigin); got != 0 {
			t.Fatalf("an origin counter is %v after the first sample, which only sets the baseline", got)
		}
	}
	n.dev.Stats[volNum] = blockdev.IOStats{ReadIOs: 1100, ReadBytes: 5 << 20, ReadTicks: 3500, InFlight: 2}
	// 10 s: 9.9 s busy (99 %), 350 ms per read, queue of 35.
	n.dev.Stats[ct.Origin] = blockdev.IOStats{ReadIOs: 180, ReadBytes: 3 << 20, ReadTicks: 37000, IOTicks: 8900, TimeInQueue: 354000, InFlight: 32}
	n.dev.Stats[ct.Data] = blockdev.IOStats{ReadIOs: 920, WriteIOs: 105, WriteBytes: 1 << 20, WriteTicks: 200, IOTicks: 1610}
	n.sampleTick()
	for _, c := range []struct {
		name   string
		series *prometheus.CounterVec
		device string
		want   float64
	}{
		{"volume reads", n.metrics.disk.reads, DeviceVolume, 1000},
		{"volume read seconds", n.metrics.disk.readTime, DeviceVolume, 3},
		{"origin reads", n.metrics.disk.reads, DeviceOrigin, 100},
		{"origin read bytes", n.metrics.disk.readBytes, DeviceOrigin, 2 << 20},
		{"origin read seconds", n.metrics.disk.readTime, DeviceOrigin, 35},
		{"origin busy seconds across the wrap", n.metrics.disk.ioTime, DeviceOrigin, 9.9},
		{"origin weighted seconds", n.metrics.disk.ioTimeWeighted, DeviceOrigin, 350},
		{"cache reads", n.metrics.disk.reads, DeviceCache, 900},
		{"cache writes", n.metrics.disk.writes, DeviceCache, 100},
		{"cache written bytes", n.metrics.disk.writtenBytes, DeviceCache, 1<<20 - 1<<16},
		{"cache write seconds", n.metrics.disk.writeTime, DeviceCache, 0.2},
		{"cache busy seconds", n.metrics.disk.ioTime, DeviceCache, 1.6},
	} {
		if got := n.disk(c.series, c.device); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := testutil.ToFloat64(n.metrics.disk.ioNow.With(withDevice(n.metrics.labels(vol), DeviceOrigin))); got != 32 {
		t.Errorf("origin requests in flight %v, want 32", got)
	}
	if got := testutil.ToFloat64(n.metrics.readBytes.With(n.metrics.labels(vol))); got != 4<<20 {
		t.Errorf("volume read bytes %v, want %d", got, 4<<20)
	}
}

// An origin re-created under the same number (counts lower than before)
// counts from zero rather than subtracting into a huge delta.
func TestDiskCountersOfARecreatedDeviceCountFromZero(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	origin := n.liveCache(t).Origin
	n.dev.Stats[origin] = blockdev.IOStats{ReadIOs: 1000, ReadTicks: 9000, IOTicks: 5000}
	n.monitor.Tick(context.Background())
	n.dev.Stats[origin] = blockdev.IOStats{ReadIOs: 7, ReadTicks: 70, IOTicks: 60}
	n.sampleTick()
	if got := n.disk(n.metrics.disk.reads, DeviceOrigin); got != 7 {
		t.Fatalf("origin reads after a re-creation %v, want 7", got)
	}
	if got := n.disk(n.metrics.disk.ioTime, DeviceOrigin); got < 0.06-1e-9 || got > 0.06+1e-9 {
		t.Fatalf("origin busy seconds after a re-creation %v, want 0.06", got)
	}
}

// The cache device's series go with the cache; the origin's stay while the
// volume is staged, and everything goes at unstage.
func TestDiskSeriesForgottenWithTheirDevice(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	ct := n.liveCache(t)
	volNum := dm.DevNum{Major: 253, Minor: 1}
	for i, num := range []dm.DevNum{volNum, ct.Origin, ct.Data} {
		n.dev.Stats[num] = blockdev.IOStats{ReadIOs: uint64(i + 1)}
	}
	n.monitor.Tick(context.Background())
	n.sampleTick()
	for _, d := range diskDevices() {
		if got := diskSeriesOf(t, n, d); got != len(n.metrics.disk.collectors()) {
			t.Fatalf("%d %s series while cached, want %d", got, d, len(n.metrics.disk.collectors()))
		}
	}
	if err := n.engine.Detach(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	n.dev.Stats[ct.Origin] = blockdev.IOStats{ReadIOs: 10}
	n.sampleTick()
	if got := diskSeriesOf(t, n, DeviceCache); got != 0 {
		t.Fatalf("%d cache device series after detach", got)
	}
	if got := n.disk(n.metrics.disk.reads, DeviceOrigin); got != 8 {
		t.Fatalf("origin reads after detach %v, want 8 (the linear table maps the same origin)", got)
	}
	if err := n.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	n.sampleTick()
	for _, d := range diskDevices() {
		if got := diskSeriesOf(t, n, d); got != 0 {
			t.Fatalf("%d %s series after unstage", got, d)
		}
	}
}

// SetOwner carries the disk counters to the PVC's labels, device by device.
func TestDiskCountersMoveToThePVCsLabels(t *testing.T) {
	n := newNode(t)
	n.metrics.observeDisk(vol, DeviceOrigin, blockdev.IOStats{}, blockdev.IOStats{ReadIOs: 5, IOTicks: 2000})
	n.metrics.observeDisk(vol, DeviceCache, blockdev.IOStats{}, blockdev.IOStats{ReadIOs: 3})
	n.metrics.SetOwner(vol, VolumeOwner{Namespace: "ns", PVC: "data"})
	owned := prometheus.Labels{LabelVolume: vol, LabelNamespace: "ns", LabelPVC: "data"}
	if got := testutil.ToFloat64(n.metrics.disk.ioTime.With(withDevice(owned, DeviceOrigin))); got != 2 {
		t.Fatalf("origin busy seconds under the PVC's labels %v, want 2", got)
	}
	if got := testutil.ToFloat64(n.metrics.disk.reads.With(withDevice(owned, DeviceCache))); got != 3 {
		t.Fatalf("cache reads under the PVC's labels %v, want 3", got)
	}
	if got := testutil.CollectAndCount(n.metrics.disk.reads); got != 2 {
		t.Fatalf("%d read series for two devices", got)
	}
}
