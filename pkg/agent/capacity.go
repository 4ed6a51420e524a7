package agent

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// metadataReservePercent of the cache pool is kept back from the reported
// capacity for metadata LVs and extent rounding (about 4 MiB + 0.07 % per cache).
const metadataReservePercent = 2

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch

// CapacityReporter publishes the node's cache capacity and the device class
// of its cache pool as Node annotations, which the controller's admission
// reads. A node without a cache pool reports 0 bytes and no class, so that
// bindings for its volumes say so instead of waiting for a report.
type CapacityReporter struct {
	reader   client.Reader
	writer   client.Client
	pools    *PoolWatch
	nodeName string
	class    string
	interval time.Duration
}

// NewCapacityReporter reports the cache pools' size, as the pool watch last
// read it, and class ("" for none) for nodeName every interval.
func NewCapacityReporter(reader client.Reader, writer client.Client, pools *PoolWatch, nodeName, class string, interval time.Duration) *CapacityReporter {
	if interval <= 0 {
		interval = time.Minute
	}
	return &CapacityReporter{reader: reader, writer: writer, pools: pools, nodeName: nodeName, class: class, interval: interval}
}

// Start reports until ctx ends, the first time as soon as the pools have
// been read.
func (c *CapacityReporter) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-c.pools.Scanned():
	}
	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()
	for {
		if err := c.Report(ctx); err != nil {
			klog.ErrorS(err, "Reporting cache capacity", "node", c.nodeName)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Report writes the annotations if they changed.
func (c *CapacityReporter) Report(ctx context.Context) error {
	total, free, err := c.pools.CacheBytes()
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	if err := c.reader.Get(ctx, client.ObjectKey{Name: c.nodeName}, node); err != nil {
		return err
	}
	class := c.class
	if total == 0 {
		class = "" // the cache pool is not up (yet): no class to admit bindings of
	}
	want := map[string]string{
		ssdv1.AnnotationCacheCapacityBytes: strconv.FormatUint(total/100*(100-metadataReservePercent), 10),
		ssdv1.AnnotationCacheFreeBytes:     strconv.FormatUint(free, 10),
		ssdv1.AnnotationCacheDeviceClass:   class,
	}
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
	klog.InfoS("Reporting cache capacity", "node", c.nodeName, "capacity", want[ssdv1.AnnotationCacheCapacityBytes],
		"free", free, "deviceClass", class)
	return c.writer.Patch(ctx, node, client.MergeFrom(before))
}
