package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/lvm"
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
// registered twice with different help texts).
func TestMetricsGatherWithoutConflicts(t *testing.T) {
	csiMetrics := newCSIMetrics("ssdcache.io")
	csiMetrics.RecordMetrics("/csi.v1.Node/NodeStageVolume", nil, time.Second)
	if _, err := agent.NewMetrics(ctrlmetrics.Registry); err != nil {
		t.Fatal(err)
	}
	families, err := nodeGatherer(csiMetrics).Gather()
	if err != nil {
		t.Fatalf("gathering /metrics: %v", err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"csi_plugin_operations_seconds", "process_start_time_seconds"} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
