package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"k8s.io/klog/v2"
	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
	"github.com/ssdcache/ssdcache/pkg/version"
)

// node is everything the plugin runs, assembled over the real OS layers.
type node struct {
	dev        blockdev.Interface
	engine     *cache.Engine
	locks      *cache.VolumeLocks
	driver     *csi.Driver
	csiMetrics metrics.CSIMetricsManager
	// cacheClass is the device class of the cache pool; "" when it did not come up.
	cacheClass string
	// pools reads the volume groups in the background for readiness, Probe
	// and the capacity report.
	pools *agent.PoolWatch
	// volumeEvents tells the agent of staged volumes (nil without the agent).
	volumeEvents *agent.VolumeEvents
	// metrics learn each staged volume's PVC from its volume context.
	metrics *agent.Metrics
}

func newNode(ctx context.Context, o options, m *agent.Metrics) (*node, error) {
	if o.nodeName == "" {
		return nil, errors.New("--node-name (or $NODE_NAME) is required")
	}
	e := exec.New()
	run := command.NewRunner(e, os.Environ()...).WithTimeout(o.commandTimeout)
	dev := blockdev.NewHost(run)
	l := lvm.NewCommand(run, o.lvmConfig, slices.Concat(o.originDevices, o.cacheDevices)...)
	pools, cacheVGs, err := setUpPools(ctx, o, lvm.NewPools(l, dev))
	if err != nil {
		return nil, err
	}
	n := &node{dev: dev, locks: cache.NewVolumeLocks(), csiMetrics: newCSIMetrics(o.driverName), metrics: m,
		pools: agent.NewPoolWatch(l, o.originVG, cacheVGs, m, agent.PoolWatchOptions{Interval: o.poolScanInterval, StaleAfter: o.poolStaleAfter, Classes: pools.CacheVGs})}
	if len(cacheVGs) > 0 {
		n.cacheClass = o.cacheClass
	}
	layers := cache.Layers{DM: dm.NewDmsetup(run), LVM: l, Dev: dev}
	if o.stateDir != "" {
		layers.Metadata = dm.NewCacheTools(run, o.stateDir)
		layers.HotSets = hotset.InStateDir(o.stateDir)
	}
	n.engine = cache.NewEngine(layers, pools, faultPoints(o.faultPoint))
	n.driver, err = csi.NewDriver(csi.Config{
		DriverName: o.driverName, Version: version.Version, NodeID: o.nodeName, Endpoint: o.endpoint, MaxVolumesPerNode: o.maxVolumes,
	}, csi.Deps{Engine: n.engine, LVM: l, Mounter: mounter.NewHost(e), Locks: n.locks, Metrics: n.csiMetrics,
		Ready: n.pools.Ready, Staged: n.onStaged(o.agent)})
	return n, err
}

// onStaged decides who gives a staged volume its cache: the node agent, for
// the volume's CacheBinding (the only owner of a cache), or without the
// agent the volume context itself.
func (n *node) onStaged(withAgent bool) func(context.Context, csi.StagedVolume) {
	next := attachFromVolumeContext(n.engine, n.locks)
	if withAgent {
		n.volumeEvents = agent.NewVolumeEvents()
		next = func(_ context.Context, v csi.StagedVolume) { n.volumeEvents.Notify(v.ID) }
	}
	return func(ctx context.Context, v csi.StagedVolume) {
		if ns, pvc := csi.PVCOf(v.Context); pvc != "" && n.metrics != nil {
			n.metrics.SetOwner(v.ID, agent.VolumeOwner{Namespace: ns, PVC: pvc})
		}
		next(ctx, v)
	}
}

// setUpPools creates or checks both volume groups. The origin pool must come
// up: it holds the data. A cache pool that cannot (a dead or refused SSD)
// leaves the node running uncached, so volumes stay usable.
func setUpPools(ctx context.Context, o options, pools *lvm.Pools) (cache.Pools, []string, error) {
	p := cache.Pools{OriginVG: o.originVG, CacheVGs: map[string]string{}, DefaultClass: o.cacheClass}
	for _, d := range o.adoptDevices {
		if !slices.Contains(o.originDevices, d) && !slices.Contains(o.cacheDevices, d) {
			return p, nil, fmt.Errorf("--adopt-devices: %s is in neither --origin-devices nor --cache-devices", d)
		}
	}
	adopt := func(devices []string) []string {
		return slices.DeleteFunc(slices.Clone(o.adoptDevices), func(d string) bool { return !slices.Contains(devices, d) })
	}
	if _, err := pools.Ensure(ctx, lvm.PoolConfig{VG: o.originVG, Role: "origin", Devices: o.originDevices, Adopt: adopt(o.originDevices)}); err != nil {
		return p, nil, fmt.Errorf("origin pool: %w", err)
	}
	if len(o.cacheDevices) == 0 {
		klog.InfoS("No cache devices configured; volumes will not be cached")
		return p, nil, nil
	}
	if _, err := pools.Ensure(ctx, lvm.PoolConfig{VG: o.cacheVG, Role: "cache", Devices: o.cacheDevices, Adopt: adopt(o.cacheDevices)}); err != nil {
		klog.ErrorS(err, "Cache pool unavailable; running without cache", "vg", o.cacheVG)
		return p, nil, nil
	}
	p.CacheVGs[o.cacheClass] = o.cacheVG
	return p, []string{o.cacheVG}, nil
}

// newCSIMetrics counts CSI calls as csi_plugin_operations_seconds. Its
// registry is served together with controller-runtime's, which already has
// process_start_time_seconds: a second one with another help text would make
// every scrape fail.
func newCSIMetrics(driverName string) metrics.CSIMetricsManager {
	return metrics.NewCSIMetricsManagerWithOptions(driverName,
		metrics.WithSubsystem(metrics.SubsystemPlugin), metrics.WithProcessStartTime(false))
}
