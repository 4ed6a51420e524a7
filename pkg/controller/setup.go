// Package controller holds the cluster-wide reconcilers of ssdcache-controller: the
// CacheBinding admission reconciler, the StorageClass-driven auto-binding one and
// the labeler of claims with the node of their volume.
package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// Field indexes on the manager's cache.
const (
	indexPVCName           = "spec.pvcName"
	indexNodeName          = "status.nodeName"
	indexClaimStorageClass = "spec.storageClassName"
)

// EventSource is the reporting controller name on Events.
const EventSource = "ssdcache-controller"

// DefaultPendingResync is how often a pending binding is re-examined without an event.
const DefaultPendingResync = 2 * time.Minute

// DefaultAgentGoneAfter is how long a node agent's Lease may be expired before
// the controller takes the agent as gone and releases its node's bindings.
const DefaultAgentGoneAfter = 10 * time.Minute

// Options tune the reconcilers.
type Options struct {
	// PendingResync re-examines pending bindings this often even without a watch
	// event; zero means DefaultPendingResync.
	PendingResync time.Duration
	// AgentLeaseNamespace is where the node agents renew their Leases; "" never
	// takes an agent as gone while its Node exists.
	AgentLeaseNamespace string
	// AgentGoneAfter is DefaultAgentGoneAfter when zero.
	AgentGoneAfter time.Duration
	// Clock is the real clock when nil.
	Clock clock.Clock
	// Registry gets the per-binding metrics (BindingCollector);
	// controller-runtime's, which the manager serves, when nil.
	Registry prometheus.Registerer
	// Workers is how many bindings are reconciled at once, and how many
	// claims labelled; DefaultWorkers when zero.
	Workers int
}

func (o Options) workers() int {
	if o.Workers <= 0 {
		return DefaultWorkers
	}
	return o.Workers
}

func (o Options) pendingResync() time.Duration {
	if o.PendingResync <= 0 {
		return DefaultPendingResync
	}
	return o.PendingResync
}

// Setup registers the field indexes and the reconcilers with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.Registry == nil {
		opts.Registry = ctrlmetrics.Registry
	}
	if err := addIndexes(ctx, mgr); err != nil {
		return err
	}
	if err := opts.Registry.Register(NewBindingCollector(mgr.GetClient(), mgr.Elected())); err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder(EventSource)
	// Leases are read uncached: a cache would watch every Lease of the cluster.
	if err := NewBindingReconciler(mgr.GetClient(), mgr.GetAPIReader(), recorder, opts).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := NewClaimLabeler(mgr.GetClient(), recorder, opts).SetupWithManager(mgr); err != nil {
		return err
	}
	return NewClaimReconciler(mgr.GetClient(), mgr.GetScheme(), recorder).SetupWithManager(mgr)
}

func addIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &ssdv1.CacheBinding{}, indexPVCName, func(o client.Object) []string {
		return []string{o.(*ssdv1.CacheBinding).Spec.PVCName}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &ssdv1.CacheBinding{}, indexNodeName, func(o client.Object) []string {
		return []string{o.(*ssdv1.CacheBinding).Status.NodeName}
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &corev1.PersistentVolumeClaim{}, indexClaimStorageClass, func(o client.Object) []string {
		if sc := o.(*corev1.PersistentVolumeClaim).Spec.StorageClassName; sc != nil {
			return []string{*sc}
		}
		return nil
	})
}
