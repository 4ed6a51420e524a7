package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/metrics"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/exec"

	"github.com/ssdcache/ssdcache/pkg/agent"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
	"github.com/ssdcache/ssdcache/pkg/version"
)

// node is everything the plugin runs, assembled over the real OS layers.
type node struct {
	dev        blockdev.Interface
	engine     *cache.Engine
	locks      *cache.VolumeLocks
	driver     *csi.Driver
	csiMetrics metrics.CSIMetricsManager
	// deviceClass is the device class of the cache pool; "" when none is configured.
	deviceClass string
	// setup brings the pools up and retries while their devices are missing
	// or refused; its Ready is the node's readiness and CSI Probe.
	setup *agent.PoolSetup
	// pools reads the volume groups in the background for readiness, Probe
	// and the capacity report.
	pools *agent.PoolWatch
	// volumeEvents tells the agent of staged volumes (nil without the agent).
	volumeEvents *agent.VolumeEvents
	// metrics learn each staged volume's PVC from its volume context.
	metrics *agent.Metrics
	// missedReads records the blocks caches miss, for the promoter; its
	// BPF programs go with the process.
	missedReads *readtrack.Kernel
}

// newNode assembles the plugin; rec (nil without the API) receives the
// Events of pool set-up on the Node. Only a configuration no node could
// use fails here: missing or refused devices leave the node running, not
// ready, and retried.
func newNode(o options, m *agent.Metrics, rec events.EventRecorder) (*node, error) {
	if o.nodeName == "" {
		return nil, errors.New("--node-name (or $NODE_NAME) is required")
	}
	origin, cachePool, err := poolSpecs(o)
	if err != nil {
		return nil, err
	}
	e := exec.New()
	run := command.NewRunner(e, os.Environ()...).WithTimeout(o.commandTimeout)
	dev := blockdev.NewHost(run)
	// LVM reads only the pool devices; selectors add theirs once resolved.
	l := lvm.NewCommand(run, o.lvmConfig)
	l.UseDevices(slices.Concat(origin.Paths, cachePool.Paths))
	n := &node{dev: dev, locks: cache.NewVolumeLocks(), missedReads: readtrack.NewKernel(), csiMetrics: newCSIMetrics(o.driverName), metrics: m,
		pools: agent.NewPoolWatch(l, o.originVG, nil, m, agent.PoolWatchOptions{Interval: o.poolScanInterval, StaleAfter: o.poolStaleAfter,
			Classes: map[string]string{o.deviceClass: o.cacheVG}})}
	if cachePool.Configured() {
		n.deviceClass = o.deviceClass
	} else {
		klog.InfoS("No cache devices configured; volumes will not be cached")
	}
	layers := cache.Layers{DM: dm.NewDmsetup(run).ReadingFrom(dm.NewControlDevice()), LVM: l, Dev: dev}
	if o.stateDir != "" {
		layers.Metadata = dm.NewCacheTools(run, o.stateDir)
		layers.HotSets = hotset.InStateDir(o.stateDir)
		layers.Files = fileblocks.NewHost()
	}
	engineOpts := []cache.Option{cache.WithBlockSectors(o.cacheBlockSize.sectors), cache.WithPossibleCPUs(possibleCPUs()), cache.WithBootID(bootID())}
	if o.promoteInterval > 0 {
		engineOpts = append(engineOpts, cache.WithPromoter())
		layers.Reads = n.missedReads
	}
	n.engine = cache.NewEngine(layers, cache.Pools{OriginVG: o.originVG, DefaultClass: o.deviceClass}, faultPoints(o.faultPoint), engineOpts...)
	n.setup = agent.NewPoolSetup(
		agent.PoolSetupConfig{NodeName: o.nodeName, Origin: origin, Cache: cachePool, DeviceClass: o.deviceClass, Interval: o.poolRetryInterval},
		agent.PoolSetupDeps{Inventory: blockdev.NewHostInventory(), Pools: lvm.NewPools(l, dev), LVM: l, Watch: n.pools,
			OnCacheUp: n.engine.AddCachePool, Metrics: m, Events: rec})
	n.driver, err = csi.NewDriver(csi.Config{
		DriverName: o.driverName, Version: version.Version, NodeID: o.nodeName, Endpoint: o.endpoint, MaxVolumesPerNode: o.maxVolumes,
		LockWait: nodeCallLockWait,
	}, csi.Deps{Engine: n.engine, LVM: l, Mounter: mounter.NewHost(e), Locks: n.locks, Metrics: n.csiMetrics,
		Ready: n.setup.Ready, Staged: n.onStaged(o.agent)})
	return n, err
}

// possibleCPUs is the kernel's num_possible_cpus, for which it keeps
// per-CPU dm-stats counters; the CPUs this process may use when it cannot
// be read.
func possibleCPUs() int {
	if list, err := os.ReadFile("/sys/devices/system/cpu/possible"); err == nil {
		if n, err := dm.ParseCPUList(string(list)); err == nil {
			return n
		}
	}
	return runtime.NumCPU()
}

// bootID is the kernel's ID of this boot, which tells the engine a reboot
// from a restart of the plugin; "" (no cache marked at shutdown) when it
// cannot be read.
func bootID() string {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		klog.InfoS("No boot ID: caches are filled from the HDD after every reboot", "err", err)
		return ""
	}
	return strings.TrimSpace(string(id))
}

// nodeCallLockWait is how long NodeStage, NodePublish and their undoing
// wait while the node agent works on their volume: an attach or resize
// takes seconds to tens of seconds, well inside kubelet's two-minute call
// timeout, while an Aborted answer costs the pod kubelet's backoff.
const nodeCallLockWait = 30 * time.Second

// poolSpecs checks the pool flags, the same on every node a DaemonSet runs
// on: what is wrong here no retry fixes, so the plugin exits.
func poolSpecs(o options) (origin, cachePool agent.PoolSpec, err error) {
	origin = agent.PoolSpec{PoolDevices: lvm.PoolDevices{VG: o.originVG, Paths: o.originDevices, Selector: o.originSelector}}
	cachePool = agent.PoolSpec{PoolDevices: lvm.PoolDevices{VG: o.cacheVG, Paths: o.cacheDevices, Selector: o.cacheSelector}}
	if !origin.Configured() {
		return origin, cachePool, errors.New("the origin pool has no devices: pass --origin-devices, --origin-selector or both")
	}
	// An adopted device goes to the pool that names it, or that may select
	// it: each attempt keeps only the adopt devices among a pool's devices.
	for _, d := range o.adoptDevices {
		toOrigin := slices.Contains(o.originDevices, d) || !o.originSelector.IsZero()
		toCache := slices.Contains(o.cacheDevices, d) || !o.cacheSelector.IsZero()
		switch {
		case !lvm.IsByIDPath(d):
			return origin, cachePool, fmt.Errorf("--adopt-devices: %q: only stable %s<id> paths are allowed: %w", d, lvm.ByIDDir, lvm.ErrInvalidDevice)
		case !toOrigin && !toCache:
			return origin, cachePool, fmt.Errorf("--adopt-devices: %s is in neither --origin-devices nor --cache-devices, and no selector could pick it", d)
		}
		if toOrigin {
			origin.Adopt = append(origin.Adopt, d)
		}
		if toCache {
			cachePool.Adopt = append(cachePool.Adopt, d)
		}
	}
	for _, p := range []agent.PoolSpec{origin, cachePool} {
		if len(p.Paths) == 0 {
			continue
		}
		adopt := slices.DeleteFunc(slices.Clone(p.Adopt), func(d string) bool { return !slices.Contains(p.Paths, d) })
		if err := lvm.ValidatePoolConfig(lvm.PoolConfig{VG: p.VG, Role: "pool", Devices: p.Paths, Adopt: adopt}); err != nil {
			return origin, cachePool, err
		}
	}
	return origin, cachePool, nil
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

// newCSIMetrics counts CSI calls as csi_plugin_operations_seconds. Its
// registry is served together with controller-runtime's, which already has
// process_start_time_seconds: a second one with another help text would make
// every scrape fail.
func newCSIMetrics(driverName string) metrics.CSIMetricsManager {
	return metrics.NewCSIMetricsManagerWithOptions(driverName,
		metrics.WithSubsystem(metrics.SubsystemPlugin), metrics.WithProcessStartTime(false))
}
