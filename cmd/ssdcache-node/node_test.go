package main

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/version"
)

const (
	hdd = "/dev/disk/by-id/ata-HDD"
	ssd = "/dev/disk/by-id/nvme-SSD"
)

func mustSelector(t *testing.T, s string) lvm.Selector {
	t.Helper()
	sel, err := lvm.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// An adopted device goes to the pool that names it or may select it.
func TestAdoptDevicesGoToTheirOwnPool(t *testing.T) {
	o := options{originVG: "hdd", cacheVG: "nvme", originDevices: list{hdd}, cacheDevices: list{ssd}, adoptDevices: list{ssd}}
	origin, cachePool, err := poolSpecs(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(origin.Adopt) != 0 || !slices.Equal(cachePool.Adopt, []string{ssd}) {
		t.Fatalf("adopt: origin %v, cache %v", origin.Adopt, cachePool.Adopt)
	}
	o = options{originVG: "hdd", cacheVG: "nvme", originDevices: list{hdd}, cacheSelector: mustSelector(t, "rotational=false"), adoptDevices: list{ssd}}
	if _, cachePool, err = poolSpecs(o); err != nil || !slices.Equal(cachePool.Adopt, []string{ssd}) {
		t.Fatalf("adopt with a cache selector: %v, %v", cachePool.Adopt, err)
	}
}

// What is wrong with the flags is wrong on every node: the plugin exits
// rather than retrying.
func TestPoolFlagsNoNodeCouldUse(t *testing.T) {
	for _, c := range []struct {
		name string
		o    options
		want string
	}{
		{"no origin devices", options{originVG: "hdd"}, "--origin-devices, --origin-selector or both"},
		{"adopt outside the pools", options{originVG: "hdd", originDevices: list{hdd}, adoptDevices: list{"/dev/disk/by-id/other"}}, "--adopt-devices"},
		{"adopt by kernel name", options{originVG: "hdd", originSelector: mustSelector(t, "rotational=true"), adoptDevices: list{"/dev/sdb"}}, "only stable"},
		{"kernel name", options{originVG: "hdd", originDevices: list{"/dev/sdb"}}, "only stable /dev/disk/by-id/<id> paths"},
		{"listed twice", options{originVG: "hdd", originDevices: list{hdd, hdd}}, "listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := poolSpecs(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if _, _, err := poolSpecs(options{originVG: "hdd", originSelector: mustSelector(t, "model=ST4000*")}); err != nil {
		t.Fatalf("a selector alone was refused: %v", err)
	}
}

func TestListFlagSplitsAndRepeats(t *testing.T) {
	var l list
	_ = l.Set("a, b")
	_ = l.Set("c")
	if l.String() != "a,b,c" {
		t.Fatalf("list %q", l.String())
	}
}

// Every series the node serves must gather together: one conflicting
// family fails the whole scrape (the e2e found process_start_time_seconds
// registered twice with different help texts). Every ssdcache series names
// the node (issue 38 point 8: the alerts and the dashboard take it from there).
func TestMetricsGatherWithoutConflicts(t *testing.T) {
	csiMetrics := newCSIMetrics("ssdcache.io")
	csiMetrics.RecordMetrics("/csi.v1.Node/NodeStageVolume", nil, time.Second)
	m, err := registerMetrics(ctrlmetrics.Registry, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	m.SetNodePoolReady(agent.PoolOrigin, true)
	m.SetPools([]agent.PoolBytes{{Pool: agent.PoolOrigin, VG: "ssdcache-hdd", Found: true, Size: 1 << 40, Free: 1 << 39}})
	families, err := nodeGatherer(csiMetrics).Gather()
	if err != nil {
		t.Fatalf("gathering /metrics: %v", err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		if f.GetName() == "ssdcache_build_info" {
			checkBuildInfo(t, f)
		}
		if strings.HasPrefix(f.GetName(), "ssdcache_") {
			for _, s := range f.GetMetric() {
				if !slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == agent.LabelNode && l.GetValue() == "node-a" }) {
					t.Errorf("%s%v does not name the node", f.GetName(), s.GetLabel())
				}
			}
		}
	}
	for _, want := range []string{"ssdcache_cache_pool_up", "ssdcache_node_pool_ready", "ssdcache_pool_size_bytes"} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, want := range []string{"csi_plugin_operations_seconds", "process_start_time_seconds", "ssdcache_build_info"} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// checkBuildInfo wants one series of value 1 whose version is the binary's.
func checkBuildInfo(t *testing.T, f *dto.MetricFamily) {
	t.Helper()
	if len(f.GetMetric()) != 1 {
		t.Fatalf("ssdcache_build_info has %d series, want 1", len(f.GetMetric()))
	}
	m := f.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["version"] != version.Version || labels["goversion"] != runtime.Version() || m.GetGauge().GetValue() != 1 {
		t.Errorf("ssdcache_build_info %v = %v, want version %q, goversion %q, value 1", labels, m.GetGauge().GetValue(), version.Version, runtime.Version())
	}
}

// NodeStage's volume context names the PVC (from CreateVolume, which copies
// csi-provisioner's --extra-create-metadata): the metrics take it at once,
// with or without the agent.
func TestStagedVolumesLabelTheirMetricsWithTheirPVC(t *testing.T) {
	for _, withAgent := range []bool{true, false} {
		m, err := agent.NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		n := &node{metrics: m}
		staged := n.onStaged(withAgent)
		// Uncached, so the standalone path attaches nothing and needs no engine.
		staged(context.Background(), csi.StagedVolume{ID: "pvc-1", Context: map[string]string{
			ssdv1.ParamCacheMode: ssdv1.CacheModeNone, csi.ContextPVCName: "data", csi.ContextPVCNamespace: "team-a"}})
		staged(context.Background(), csi.StagedVolume{ID: "pvc-2", Context: map[string]string{ssdv1.ParamCacheMode: ssdv1.CacheModeNone}})
		if o, ok := m.Owner("pvc-1"); !ok || o != (agent.VolumeOwner{Namespace: "team-a", PVC: "data"}) {
			t.Errorf("agent %v: owner of pvc-1 %+v (known %v), want team-a/data", withAgent, o, ok)
		}
		if _, ok := m.Owner("pvc-2"); ok {
			t.Errorf("agent %v: a volume without PVC metadata got an owner", withAgent)
		}
	}
}

func TestCacheBlockSizeFlag(t *testing.T) {
	for v, want := range map[string]uint64{"32Ki": 64, "64Ki": 128, "256Ki": 512, "1Mi": 2048, "1Gi": 2097152} {
		var b blockSize
		if err := b.Set(v); err != nil || b.sectors != want {
			t.Errorf("--cache-block-size=%s: %d sectors (%v), want %d", v, b.sectors, err, want)
		}
	}
	for _, v := range []string{"100Ki", "0", "16Ki", "2Gi", "-64Ki", "fast"} {
		var b blockSize
		if err := b.Set(v); err == nil {
			t.Errorf("--cache-block-size=%s accepted as %d sectors", v, b.sectors)
		}
	}
	if got := (&blockSize{512}).String(); got != "256Ki" {
		t.Errorf("512 sectors shown as %q, want 256Ki", got)
	}
}
