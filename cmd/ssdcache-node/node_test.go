package main

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/version"
)

const (
	hdd = "/dev/disk/by-id/ata-HDD"
	ssd = "/dev/disk/by-id/nvme-SSD"
)

func devices(ssdSignature string) *blockdevfake.Devices {
	d := blockdevfake.New()
	d.Add(hdd, blockdevfake.Device{Node: "/dev/sda", Size: 100 << 30})
	dev := blockdevfake.Device{Node: "/dev/nvme0n1", Size: 10 << 30}
	if ssdSignature != "" {
		dev.Signatures = []blockdev.Signature{{Type: ssdSignature, Offset: "0x0"}}
	}
	d.Add(ssd, dev)
	return d
}

func TestAdoptDevicesGoToTheirOwnPool(t *testing.T) {
	o := options{originVG: "hdd", cacheVG: "nvme", cacheClass: "nvme",
		originDevices: list{hdd}, cacheDevices: list{ssd}, adoptDevices: list{ssd}}
	pools, vgs, err := setUpPools(context.Background(), o, lvm.NewPools(lvmfake.New(), devices("xfs")))
	if err != nil {
		t.Fatal(err)
	}
	if pools.CacheVGs["nvme"] != "nvme" || len(vgs) != 1 {
		t.Fatalf("adopted cache device not used: %+v %v", pools, vgs)
	}
}

func TestRefusedCacheDeviceLeavesNodeUncached(t *testing.T) {
	o := options{originVG: "hdd", cacheVG: "nvme", cacheClass: "nvme", originDevices: list{hdd}, cacheDevices: list{ssd}}
	pools, vgs, err := setUpPools(context.Background(), o, lvm.NewPools(lvmfake.New(), devices("ext4")))
	if err != nil || len(vgs) != 0 || len(pools.CacheVGs) != 0 {
		t.Fatalf("want an uncached node, got %+v %v %v", pools, vgs, err)
	}
}

func TestAdoptDeviceOutsideThePools(t *testing.T) {
	o := options{originVG: "hdd", originDevices: list{hdd}, adoptDevices: list{"/dev/disk/by-id/other"}}
	_, _, err := setUpPools(context.Background(), o, lvm.NewPools(lvmfake.New(), devices("")))
	if err == nil || !strings.Contains(err.Error(), "--adopt-devices") {
		t.Fatalf("err = %v", err)
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
// registered twice with different help texts).
func TestMetricsGatherWithoutConflicts(t *testing.T) {
	csiMetrics := newCSIMetrics("ssdcache.io")
	csiMetrics.RecordMetrics("/csi.v1.Node/NodeStageVolume", nil, time.Second)
	if _, err := registerMetrics(ctrlmetrics.Registry); err != nil {
		t.Fatal(err)
	}
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
