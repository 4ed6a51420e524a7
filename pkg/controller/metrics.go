package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// BindingCollector exports one series per CacheBinding, read from the
// manager's cache at scrape time (so a deleted binding leaves no stale
// series): whether its volume has its cache, with the phase and the reason
// that say why not, and the node of its volume. The alert for a volume
// running without its cache reads it (aggregating phase and reason away, so
// that a change of reason does not start its wait again), and so does the
// dashboard's bindings-by-phase panel.
type BindingCollector struct {
	reader client.Reader
	// elected is closed once this replica leads; the others export nothing,
	// so that the series are not doubled across replicas.
	elected <-chan struct{}
	desc    *prometheus.Desc
}

// NewBindingCollector reads bindings through reader once elected is closed.
func NewBindingCollector(reader client.Reader, elected <-chan struct{}) *BindingCollector {
	return &BindingCollector{reader: reader, elected: elected, desc: prometheus.NewDesc(
		"ssdcache_cachebinding_cache_attached",
		"1 while a CacheBinding's cache is attached to its volume (phase Attached or Paused), 0 otherwise; "+
			"phase and reason (the Ready condition's) say why not; node is its volume's.",
		[]string{"namespace", "cachebinding", "persistentvolumeclaim", "node", "phase", "reason"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *BindingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *BindingCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return
	}
	// The cache answers from memory; the deadline only bounds a cache not synced yet.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The cache's own objects, not copies: Collect only reads them, and a
	// copy of every binding at each scrape was as large as the cache itself.
	var list ssdv1.CacheBindingList
	if err := c.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		klog.ErrorS(err, "Listing CacheBindings for the metrics")
		return
	}
	for i := range list.Items {
		b := &list.Items[i]
		attached := 0.0
		if b.Status.Phase == ssdv1.PhaseAttached || b.Status.Phase == ssdv1.PhasePaused {
			attached = 1
		}
		reason := ""
		if ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady); ready != nil {
			reason = ready.Reason
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, attached,
			b.Namespace, b.Name, b.Spec.PVCName, c.nodeOf(ctx, b), string(b.Status.Phase), reason)
	}
}

// nodeOf is the node of b's volume: status.nodeName once admitted, before
// that the node its PV is pinned to, so that a binding Pending for the
// node's capacity is labelled with that node from the start and keeps the
// label when admitted. "" while the PVC is unbound or its PV is not an
// ssdcache volume pinned to one node.
func (c *BindingCollector) nodeOf(ctx context.Context, b *ssdv1.CacheBinding) string {
	if b.Status.NodeName != "" {
		return b.Status.NodeName
	}
	t, err := resolveTarget(ctx, c.reader, b)
	if _, err := asPending(err); err != nil {
		klog.ErrorS(err, "Reading the volume of a CacheBinding for the metrics", "binding", klog.KObj(b))
	}
	return t.nodeName
}
