package agent

import (
	"cmp"
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cache"
)

// Config is what the agent needs from the node.
type Config struct {
	NodeName string
	Engine   *cache.Engine
	Dev      blockdev.Interface
	Locks    *cache.VolumeLocks
	Metrics  *Metrics
	// Pools is the node's background LVM scan, which the capacity report and
	// the retry of Degraded bindings (its missing PVs) read.
	Pools *PoolWatch
	// DeviceClass is the device class of the node's cache pool; "" when the
	// node runs without cache.
	DeviceClass                    string
	HealthInterval, SampleInterval time.Duration
	CapacityInterval               time.Duration
	// PromoteInterval is how often the blocks read on warm caches are
	// promoted (DefaultPromoteInterval is the node plugin's default); zero
	// turns promotion off.
	PromoteInterval time.Duration
	// FiguresInterval is the least time between two writes of a binding's
	// cache figures to its status (DefaultFiguresInterval).
	FiguresInterval time.Duration
	// LeaseNamespace is where the agent renews its Lease; "" renews none.
	LeaseNamespace string
	// VolumeEvents carries NodeStage's news of staged volumes; nil makes one
	// for the monitor's drops alone.
	VolumeEvents *VolumeEvents
	// Expander grows this node's volumes when their claims ask for more
	// (the CSI controller of the same process); nil runs no resizer.
	Expander VolumeExpander
	// DriverName is the CSI driver whose PVs the resizer grows.
	DriverName string
	// Workers is how many bindings the agent applies at once
	// (DefaultWorkers when zero): an attach that fills a large cache from
	// its hot set reads the HDD for minutes, and must not hold the other
	// bindings of the node (their attach, resize, detach and finalizer).
	// Work on one volume is serialised by its lock whatever the count.
	Workers int
}

// DefaultWorkers bounds the warm-ups a node runs at once: each reads its
// own HDD-backed volume, and four keep a node with a few HDDs busy without
// queueing every other binding behind them.
const DefaultWorkers = 4

// Setup adds the monitor, the binding reconciler, the volume resizer and the capacity reporter to mgr.
func Setup(mgr ctrl.Manager, cfg Config) error {
	samples := NewSamples()
	volumes := cfg.VolumeEvents
	if volumes == nil {
		volumes = NewVolumeEvents()
	}
	monitor := NewMonitor(cfg.Engine, cfg.Dev, cfg.Locks, samples, cfg.Metrics, MonitorOptions{
		HealthInterval: cfg.HealthInterval, SampleInterval: cfg.SampleInterval, OnDrop: volumes.Notify,
	})
	if err := mgr.Add(monitor); err != nil {
		return err
	}
	if p := cfg.Promoter(monitor.CacheLost); p != nil {
		if err := mgr.Add(p); err != nil {
			return err
		}
	}
	opts := BindingOptions{FiguresInterval: cfg.FiguresInterval, Metrics: cfg.Metrics, CacheLost: monitor.CacheLost, APIReader: mgr.GetAPIReader()}
	if cfg.Pools != nil {
		opts.MissingPVs = cfg.Pools.MissingPVs
	}
	r := NewBindingReconciler(mgr.GetClient(), mgr.GetEventRecorder(EventSource), cfg.Engine, cfg.Locks, samples, cfg.NodeName, opts)
	err := ctrl.NewControllerManagedBy(mgr).
		Named("cachebinding-agent").
		For(&ssdv1.CacheBinding{}, builder.WithPredicates(onNode(cfg.NodeName), relevantChange(), r.stopFillOnChange())).
		WatchesRawSource(source.Channel(volumes.ch, handler.TypedEnqueueRequestsFromMapFunc(r.bindingsOfVolume))).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(cfg.Workers, DefaultWorkers)}).
		Complete(r)
	if err != nil {
		return err
	}
	if cfg.LeaseNamespace != "" {
		if err := mgr.Add(NewLeaseRenewer(mgr.GetAPIReader(), mgr.GetClient(), cfg.LeaseNamespace, cfg.NodeName, 0, nil)); err != nil {
			return err
		}
	}
	if err := mgr.Add(unclaimedSweep{r: r, interval: r.resync, waitSynced: mgr.GetCache().WaitForCacheSync}); err != nil {
		return err
	}
	if cfg.Expander != nil {
		resizer := NewResizeReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(EventSource), cfg.Expander, cfg.DriverName, cfg.NodeName)
		if err := resizer.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	return mgr.Add(NewCapacityReporter(mgr.GetAPIReader(), mgr.GetClient(), cfg.Pools, cfg.NodeName, cfg.DeviceClass,
		cfg.Engine.BlockSectors(), cfg.CapacityInterval))
}

// CacheOptions is what the node's manager caches: of the CacheBindings and of
// the claims, only those the controller labelled with this node
// (ssdv1.LabelNode), so that an agent's memory and its sweeps grow with its
// own node's bindings and volumes, not the cluster's; and no object's
// managedFields, which nothing here reads. The claims, which only wake the
// resizer, are held as claimStubs. PVs are never cached: the resizer reads
// the few it needs directly.
func CacheOptions(nodeName string) crcache.Options {
	thisNode := labels.SelectorFromSet(labels.Set{ssdv1.LabelNode: nodeName})
	return crcache.Options{
		DefaultTransform: crcache.TransformStripManagedFields(),
		ByObject: map[client.Object]crcache.ByObject{
			&ssdv1.CacheBinding{}:           {Label: thisNode},
			&corev1.PersistentVolumeClaim{}: {Label: thisNode, Transform: claimStub},
		},
	}
}

// onNode keeps the bindings admitted to this node, and those that just
// stopped being admitted here (their cache must go).
func onNode(node string) predicate.Predicate {
	here := func(o client.Object) bool {
		b, ok := o.(*ssdv1.CacheBinding)
		return ok && b.Status.NodeName == node
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return here(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return here(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return here(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return here(e.ObjectOld) || here(e.ObjectNew) },
	}
}

// relevantChange ignores the agent's own status writes (figures,
// conditions), which would otherwise make every write cause a reconcile.
func relevantChange() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*ssdv1.CacheBinding)
		n, okNew := e.ObjectNew.(*ssdv1.CacheBinding)
		if !okOld || !okNew {
			return true
		}
		return o.Generation != n.Generation || !n.DeletionTimestamp.Equal(o.DeletionTimestamp) ||
			o.Status.NodeName != n.Status.NodeName || o.Status.VolumeHandle != n.Status.VolumeHandle ||
			o.Status.ResolvedSizeBytes != n.Status.ResolvedSizeBytes || len(o.Finalizers) != len(n.Finalizers)
	}}
}

// bindingsOfVolume maps a volume event to the bindings admitted here that name the volume.
func (r *BindingReconciler) bindingsOfVolume(ctx context.Context, volumeID string) []reconcile.Request {
	var list ssdv1.CacheBindingList
	if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, b := range list.Items {
		if b.Status.NodeName == r.nodeName && b.Status.VolumeHandle == volumeID {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
		}
	}
	return reqs
}

// Promoter returns the promoter cfg asks for, nil when it is turned off;
// it reports a cache it could not load back to cacheLost.
func (cfg Config) Promoter(cacheLost func(volumeID, why string)) *Promoter {
	if cfg.PromoteInterval <= 0 {
		return nil
	}
	return NewPromoter(cfg.Engine, cfg.Locks, cfg.Metrics, nil, cfg.PromoteInterval, cacheLost)
}
