package agent

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// scrapedCounters are the counter series of volumeID as a scrape of reg
// would read them (Gather creates no series, unlike With), by family name
// and device ("" for the per-volume families).
func scrapedCounters(t *testing.T, reg prometheus.Gatherer, volumeID string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range f.GetMetric() {
			var volume, device string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case LabelVolume:
					volume = l.GetValue()
				case LabelDevice:
					device = l.GetValue()
				}
			}
			if volume != volumeID {
				continue
			}
			key := f.GetName()
			if device != "" {
				key += "{device=" + device + "}"
			}
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}

func keys(m map[string]float64) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

// Issue 38: every labelled counter of a volume exists at 0 from the moment
// the node sees the volume, before anything is counted, so that a
// Prometheus scrape reads 0 first and increase() sees the first drop (0 to
// 1). A series born at 1 has no increase(): SSDCacheDropped missed every
// volume's first drop (test/chart's TestPrometheusRulesFire shows it with
// Prometheus's own rule evaluation).
func TestCountersExistAtZeroThenCountTheFirstDrop(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	ct := n.liveCache(t)
	for _, num := range []dm.DevNum{{Major: 253, Minor: 1}, ct.Origin, ct.Data} {
		n.dev.Stats[num] = blockdev.IOStats{ReadIOs: 10, ReadBytes: 1 << 20}
	}
	if got := scrapedCounters(t, n.reg, vol); len(got) != 0 {
		t.Fatalf("series before the monitor saw the volume: %s", keys(got))
	}
	n.monitor.Tick(context.Background())

	got := scrapedCounters(t, n.reg, vol)
	var want []string
	for _, c := range n.metrics.volumeCounters() {
		want = append(want, fqName(t, c))
	}
	for _, c := range n.metrics.disk.counters() {
		for _, d := range diskDevices() {
			want = append(want, fqName(t, c)+"{device="+d+"}")
		}
	}
	for _, name := range want {
		v, ok := got[name]
		if !ok {
			t.Errorf("%s: no series after the first tick", name)
		} else if v != 0 {
			t.Errorf("%s = %v after the first tick, which only sets baselines; want 0", name, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d counter series of the volume, want %d: %s", len(got), len(want), keys(got))
	}

	n.dm.StatusOverride["ssdcache-"+vol] = "0 20971520 cache Fail"
	n.monitor.Tick(context.Background())
	if tbl, _ := n.dm.Table(context.Background(), "ssdcache-"+vol); tbl.Target.Type() != "linear" {
		t.Fatalf("table %q after the failure, want linear", tbl)
	}
	delete(n.dm.StatusOverride, "ssdcache-"+vol)
	n.sampleTick() // the cache's series go with it
	got = scrapedCounters(t, n.reg, vol)
	if d := got["ssdcache_cache_drops_total"]; d != 1 {
		t.Fatalf("drops_total %v after the drop, want 1 (series %s)", d, keys(got))
	}
	if _, ok := got["ssdcache_cache_read_hits_total"]; ok {
		t.Errorf("read_hits_total still exported for a dropped cache")
	}

	// Unstaged: every series goes but drops_total, which a drop just before
	// the unstage must keep for increase().
	if err := n.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	n.sampleTick()
	got = scrapedCounters(t, n.reg, vol)
	if len(got) != 1 || got["ssdcache_cache_drops_total"] != 1 {
		t.Fatalf("after unstage: %v, want drops_total 1 alone", got)
	}
}

// A staged volume without a cache has drops_total and its byte counters at
// 0, but no cache counters. Here the block layer's counters cannot be read
// (no I/O sample): the byte counters still go at unstage.
func TestUncachedVolumeHasNoCacheCounters(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	n.monitor.Tick(context.Background())
	got := scrapedCounters(t, n.reg, vol)
	for _, name := range []string{"ssdcache_cache_drops_total", "ssdcache_volume_read_bytes_total", "ssdcache_volume_written_bytes_total"} {
		if v, ok := got[name]; !ok || v != 0 {
			t.Errorf("%s: %v (exported %v), want 0", name, v, ok)
		}
	}
	for _, c := range n.metrics.cacheCounters() {
		if _, ok := got[fqName(t, c)]; ok {
			t.Errorf("%s exported for a volume without a cache", fqName(t, c))
		}
	}
	if err := n.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	n.monitor.Tick(context.Background())
	if got := scrapedCounters(t, n.reg, vol); len(got) != 1 || got["ssdcache_cache_drops_total"] != 0 {
		t.Fatalf("after unstage: %v, want drops_total 0 alone", got)
	}
}

// SetOwner moves series at 0 too: the PVC's labels start at 0 (not at the
// first increment), and the series under the old labels go.
func TestZeroCountersMoveToThePVCsLabels(t *testing.T) {
	n := newNode(t)
	n.stage(t, &cache.Spec{SizeBytes: gib, Mode: cache.ModeReadCache})
	n.monitor.Tick(context.Background())
	n.metrics.SetOwner(vol, VolumeOwner{Namespace: "ns", PVC: "data"})
	families, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		if f.GetName() != "ssdcache_cache_drops_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			seen++
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l[LabelNamespace] != "ns" || l[LabelPVC] != "data" || m.GetCounter().GetValue() != 0 {
				t.Errorf("drops_total series %v = %v, want the PVC's labels at 0", l, m.GetCounter().GetValue())
			}
		}
	}
	if seen != 1 {
		t.Fatalf("%d drops_total series after SetOwner, want 1", seen)
	}
	// A volume never seen has nothing to move, and gets no series.
	n.metrics.SetOwner("pvc-unseen", VolumeOwner{Namespace: "ns", PVC: "other"})
	if got := scrapedCounters(t, n.reg, "pvc-unseen"); len(got) != 0 {
		t.Fatalf("SetOwner created series for a volume the monitor never saw: %s", keys(got))
	}
}

// fqName is a counter vector's metric name.
func fqName(t *testing.T, c *prometheus.CounterVec) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	s := (<-ch).String()
	const prefix = `fqName: "`
	i := strings.Index(s, prefix)
	if i < 0 {
		t.Fatalf("no fqName in %s", s)
	}
	s = s[i+len(prefix):]
	return s[:strings.IndexByte(s, '"')]
}
