package agent

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// metadataReservePercent of the cache pool is kept back from the capacity
// annotation for metadata LVs and extent rounding, for controllers that
// predate the pool annotations and charge a cache its data bytes only. It
// is not enough for small caches (a 16 MiB one takes 24 MiB of 4 MiB
// extents), which is why the pool annotations exist.
const metadataReservePercent = 2

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch

// CapacityReporter publishes the node's cache pool and its device class as
// Node annotations, which the controller's admission reads: the pool's size,
// its extent size and the block size of new caches, from which admission
// computes what each cache takes of the pool (cachesize.Footprint: its data
// and metadata LVs in whole extents, as lvcreate allocates them). A node
// without a cache pool reports 0 bytes and no class, so that bindings for
// its volumes say so instead of waiting for a report.
type CapacityReporter struct {
	reader   client.Reader
	writer   client.Client
	pools    *PoolWatch
	nodeName string
	class    string
	// blockSectors is the block size of new caches before doubling
	// (cache.Engine.BlockSectors).
	blockSectors uint64
	interval     time.Duration
}

// NewCapacityReporter reports the cache pools as the pool watch last read
// them, class ("" for none) and blockSectors for nodeName every interval.
func NewCapacityReporter(reader client.Reader, writer client.Client, pools *PoolWatch, nodeName, class string, blockSectors uint64, interval time.Duration) *CapacityReporter {
	if interval <= 0 {
		interval = time.Minute
	}
	return &CapacityReporter{reader: reader, writer: writer, pools: pools, nodeName: nodeName, class: class,
		blockSectors: blockSectors, interval: interval}
}

// Start reports until ctx ends, the first time as soon as the pools have
// been read.
func (c *CapacityReporter) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-c.pools.Scanned():
	}
	// Jittered as kubelet's node status loop is: every node of the cluster
	// writes its Node object once an interval, and need not do so in step.
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if err := c.Report(ctx); err != nil {
			klog.ErrorS(err, "Reporting cache capacity", "node", c.nodeName)
		}
	}, c.interval, capacityJitter, true)
	return nil
}

// capacityJitter delays each report by up to 4 % of the interval (kubelet's
// factor for its node status).
const capacityJitter = 0.04

// Report writes the annotations if they changed.
func (c *CapacityReporter) Report(ctx context.Context) error {
	pool, err := c.pools.CachePool()
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.reader.Get(ctx, client.ObjectKey{Name: c.nodeName}, node); err != nil {
		return err
	}
	want := c.annotations(pool)
	before := node.DeepCopy()
	changed := false
	for k, v := range want {
		if old, ok := node.Annotations[k]; !ok || old != v {
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[k], changed = v, true
		}
	}
	if !changed {
		return nil
	}
	klog.InfoS("Reporting cache capacity", "node", c.nodeName, "pool", pool.Size, "extent", pool.ExtentBytes,
		"blockSectors", c.blockSectors, "free", pool.Free, "deviceClass", want[ssdv1.AnnotationDeviceClass])
	return c.writer.Patch(ctx, node, client.MergeFrom(before))
}

// annotations are the Node annotations that report pool.
func (c *CapacityReporter) annotations(pool CachePool) map[string]string {
	class := c.class
	if pool.Size == 0 {
		class = "" // the cache pool is not up (yet): no class to admit bindings of
	}
	return map[string]string{
		ssdv1.AnnotationCachePoolBytes:     strconv.FormatUint(pool.Size, 10),
		ssdv1.AnnotationCacheExtentBytes:   strconv.FormatUint(pool.ExtentBytes, 10),
		ssdv1.AnnotationCacheBlockBytes:    strconv.FormatUint(c.blockSectors*cachesize.SectorSize, 10),
		ssdv1.AnnotationCacheCapacityBytes: strconv.FormatUint(pool.Size/100*(100-metadataReservePercent), 10),
		ssdv1.AnnotationCacheFreeBytes:     strconv.FormatUint(pool.Free, 10),
		ssdv1.AnnotationDeviceClass:        class,
		// Also under the name controllers before 0.2 read, for the
		// upgrade, when a controller of either release may admit.
		ssdv1.AnnotationDeviceClassDeprecated: class,
	}
}
