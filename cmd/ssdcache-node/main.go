// Command ssdcache-node is the per-node plugin: the CSI Identity, Controller
// (beside external-provisioner --node-deployment) and Node services, the
// node agent that applies CacheBindings, and the Prometheus metrics of every
// cache, in one controller-runtime manager.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/logging"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/memlimit"
	"github.com/ssdcache/ssdcache/pkg/version"
)

type options struct {
	nodeName, endpoint, driverName string
	originVG, cacheVG, deviceClass string
	// cacheClass is --cache-class, --device-class's name before 0.2.
	cacheClass                     string
	originDevices, cacheDevices    list
	originSelector, cacheSelector  lvm.Selector
	adoptDevices                   list
	lvmConfig                      string
	metricsAddr, probeAddr         string
	maxVolumes                     int64
	agent                          bool
	healthInterval, sampleInterval time.Duration
	statusInterval                 time.Duration
	promoteInterval                time.Duration
	poolScanInterval               time.Duration
	poolRetryInterval              time.Duration
	poolStaleAfter                 time.Duration
	commandTimeout                 time.Duration
	faultPoint                     string
	leaseNamespace                 string
	stateDir                       string
	cacheBlockSize                 blockSize
	// awaitCSI, when set, makes the process only wait for the CSI endpoint
	// of another one to answer (the chart's postStart hook).
	awaitCSI time.Duration
	// printVersion makes the process print its version and exit.
	printVersion bool
	logging      *logging.Options
}

// list is a comma-separated, repeatable flag.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// blockSize is a dm-cache block size flag, as a quantity of bytes.
type blockSize struct{ sectors uint64 }

func (b *blockSize) String() string {
	return resource.NewQuantity(int64(b.sectors*cachesize.SectorSize), resource.BinarySI).String()
}

func (b *blockSize) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return err
	}
	bytes := q.Value()
	if bytes <= 0 || bytes%cachesize.SectorSize != 0 || cachesize.ValidateBlockSectors(uint64(bytes)/cachesize.SectorSize) != nil {
		return fmt.Errorf("%s: must be a multiple of 32Ki between 32Ki and 1Gi", v)
	}
	b.sectors = uint64(bytes) / cachesize.SectorSize
	return nil
}

func parseFlags() options {
	o := options{cacheBlockSize: blockSize{cachesize.DefaultBlockSectors}}
	o.logging = logging.AddFlags(flag.CommandLine)
	flag.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (the Node object and the CSI node ID); defaults to $NODE_NAME")
	flag.StringVar(&o.endpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI gRPC endpoint")
	flag.StringVar(&o.driverName, "driver-name", ssdv1.DriverName, "CSI driver name")
	flag.StringVar(&o.originVG, "origin-vg", "ssdcache-hdd", "volume group of origin volumes (HDDs)")
	flag.Var(&o.originDevices, "origin-devices", "HDDs of the origin volume group, as /dev/disk/by-id paths (comma-separated or repeated)")
	flag.StringVar(&o.cacheVG, "cache-vg", "ssdcache-nvme", "volume group of cache slices (NVMe)")
	flag.Var(&o.cacheDevices, "cache-devices", "NVMe devices of the cache volume group, as /dev/disk/by-id paths; none runs the node without cache")
	flag.StringVar(&o.deviceClass, "device-class", "nvme", "device class of the cache volume group (the StorageClass parameter ssdcache.io/device-class and CacheBinding spec.deviceClass that select it)")
	flag.StringVar(&o.cacheClass, "cache-class", "", "DEPRECATED: the name of --device-class before 0.2")
	flag.Var(&o.originSelector, "origin-selector", "selects more HDDs of the origin volume group on each node, by their /dev/disk/by-id links and sysfs: comma-separated by-id=<glob of by-id paths>, model=<glob>, min-size=<quantity>, max-size=<quantity>, rotational=<bool>; whole disks only")
	flag.Var(&o.cacheSelector, "cache-selector", "selects more NVMe/SSD devices of the cache volume group on each node, as --origin-selector does")
	flag.Var(&o.adoptDevices, "adopt-devices", "devices that may be wiped although they carry a filesystem, partition table or LVM signature")
	flag.StringVar(&o.lvmConfig, "lvm-config", "", "extra lvm --config, e.g. for nodes without udev")
	flag.StringVar(&o.metricsAddr, "metrics-address", ":9810", "address of the Prometheus /metrics endpoint; empty disables it")
	flag.StringVar(&o.probeAddr, "health-probe-address", ":9811", "address of /healthz and /readyz (with the agent)")
	flag.Int64Var(&o.maxVolumes, "max-volumes-per-node", 0, "volumes this node accepts; 0 means no limit")
	flag.BoolVar(&o.agent, "agent", true, "run the CacheBinding node agent (needs the Kubernetes API)")
	flag.StringVar(&o.leaseNamespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease the agent renews, by which the controller tells a gone agent from a busy one; defaults to $POD_NAMESPACE; empty renews none")
	flag.DurationVar(&o.healthInterval, "health-interval", agent.DefaultHealthInterval, "how often caches are checked for failure")
	flag.DurationVar(&o.sampleInterval, "sample-interval", agent.DefaultSampleInterval, "how often cache counters are exported")
	flag.DurationVar(&o.statusInterval, "status-interval", agent.DefaultFiguresInterval, "least time between two writes of a CacheBinding's cache figures (hits, fill) to its status")
	flag.DurationVar(&o.promoteInterval, "promote-interval", agent.DefaultPromoteInterval, "how often the blocks read on caches that warm up (spec.warmup HotSet) are copied into their free cache blocks at once, instead of over the several passes dm-cache's smq needs; 0 turns it off")
	flag.DurationVar(&o.poolScanInterval, "pool-scan-interval", agent.DefaultPoolScanInterval, "how often the volume groups are read for readiness, the CSI Probe and the capacity report")
	flag.DurationVar(&o.poolRetryInterval, "pool-retry-interval", agent.DefaultPoolRetryInterval, "how often a pool whose devices are missing, refused or not selected is set up again (the node stays running, not ready while its origin pool is not up)")
	flag.DurationVar(&o.poolStaleAfter, "pool-stale-after", agent.DefaultPoolStaleAfter, "readiness turns false when no LVM scan has succeeded for this long; a scan running longer is abandoned")
	flag.DurationVar(&o.commandTimeout, "command-timeout", command.DefaultTimeout, "a dmsetup, lvm, wipefs or blockdev command still running after this long is killed (a hung tool must not hold a volume forever); 0 leaves only the caller's deadline")
	flag.DurationVar(&o.awaitCSI, "await-csi", 0, "do not run the plugin: wait up to this long for the plugin at --csi-endpoint to answer, then exit (0 once it answers); for a postStart hook that holds the sidecars back until the plugin serves")
	flag.StringVar(&o.stateDir, "state-dir", "/var/lib/ssdcache", "directory on the node's root disk for what must outlive the process and a reboot: each volume's hot set (hotsets/), with which a new cache of the volume is filled; empty keeps none")
	flag.Var(&o.cacheBlockSize, "cache-block-size", "dm-cache block size of new caches; a cache of more than a million such blocks gets larger ones, as lvm2 does. Larger blocks fill a cache in fewer promotions and read sequentially faster; smaller ones waste less SSD on scattered small reads (lvm2's default is 64Ki). Caches made before a change keep theirs until they are made again")
	flag.BoolVar(&o.printVersion, "version", false, "print the version and exit")
	flag.StringVar(&o.faultPoint, "fault-point", "", "TESTING ONLY: kill the process with SIGKILL at this fault point, e.g. attach/zero-metadata")
	flag.Parse()
	return o
}

// setFlags are the names of the flags the command line gave.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// resolveDeviceClass takes --cache-class, deprecated, as --device-class,
// warning once (here, at start), and refuses the two flags given different
// values: which one the user meant cannot be told.
func (o *options) resolveDeviceClass(set map[string]bool) error {
	if !set["cache-class"] {
		return nil
	}
	if set["device-class"] && o.deviceClass != o.cacheClass {
		return fmt.Errorf("--device-class=%q and --cache-class=%q (its deprecated name) differ; give --device-class alone", o.deviceClass, o.cacheClass)
	}
	klog.Warningf("--cache-class=%s is deprecated: use --device-class=%s", o.cacheClass, o.cacheClass)
	o.deviceClass = o.cacheClass
	return nil
}

func main() {
	o := parseFlags()
	if o.printVersion {
		fmt.Println(version.Get().String("ssdcache-node"))
		return
	}
	if err := o.logging.Apply(); err != nil {
		fmt.Fprintln(os.Stderr, "ssdcache-node:", err)
		os.Exit(2)
	}
	ctrl.SetLogger(klog.NewKlogr())
	if err := o.resolveDeviceClass(setFlags(flag.CommandLine)); err != nil {
		fmt.Fprintln(os.Stderr, "ssdcache-node:", err)
		os.Exit(2)
	}
	ctx := ctrl.SetupSignalHandler()
	if o.awaitCSI > 0 {
		if err := awaitCSI(ctx, o.endpoint, o.awaitCSI); err != nil {
			klog.ErrorS(err, "ssdcache-node --await-csi failed")
			klog.Flush()
			os.Exit(1)
		}
		return
	}
	memLimit, err := memlimit.Apply(os.Getenv, debug.SetMemoryLimit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ssdcache-node:", err)
		os.Exit(2)
	}
	klog.InfoS("Go memory limit", "goMemoryLimit", memLimit.String())
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "ssdcache-node failed")
		klog.Flush()
		os.Exit(1)
	}
}
