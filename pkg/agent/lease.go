package agent

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// DefaultLeaseRenewInterval is how often the agent renews its Lease; the
// Lease says it holds for four intervals.
const DefaultLeaseRenewInterval = 10 * time.Second

// LeaseRenewer keeps the node agent's Lease (ssdv1.AgentLeaseName) renewed,
// so that the controller can tell an agent that is gone for good (helm
// uninstall, a node that no longer runs the DaemonSet) from a busy one, and
// release the finalizers of the bindings admitted to its node.
//
// Hand-written rather than k8s.io/component-helpers/apimachinery/lease:
// that controller writes through a typed clientset, and the agent is given
// the manager's controller-runtime clients (an uncached reader, as below).
type LeaseRenewer struct {
	reader    client.Reader
	writer    client.Client
	namespace string
	nodeName  string
	interval  time.Duration
	clock     clock.Clock
}

// NewLeaseRenewer renews nodeName's Lease in namespace every interval. reader
// must not be a cached client: a cache would list and watch every Lease of
// the cluster, which the agent may not (and need not) do.
func NewLeaseRenewer(reader client.Reader, writer client.Client, namespace, nodeName string, interval time.Duration, clk clock.Clock) *LeaseRenewer {
	if interval <= 0 {
		interval = DefaultLeaseRenewInterval
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &LeaseRenewer{reader: reader, writer: writer, namespace: namespace, nodeName: nodeName, interval: interval, clock: clk}
}

// Start renews every interval (jittered by up to leaseJitter of it, as
// component-helpers' lease controller does) until ctx ends; it is a
// controller-runtime Runnable. It paces with real time: tests call Renew.
func (l *LeaseRenewer) Start(ctx context.Context) error {
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if err := l.Renew(ctx); err != nil {
			klog.ErrorS(err, "Renewing the node agent's Lease", "namespace", l.namespace, "node", l.nodeName)
		}
	}, l.interval, leaseJitter, true)
	return nil
}

// leaseJitter is component-helpers' lease controller's: renewals of a
// cluster's agents drift apart, and a Lease that holds for four intervals
// never lapses for it.
const leaseJitter = 0.04

// Renew creates the Lease or moves its renew time to now.
func (l *LeaseRenewer) Renew(ctx context.Context) error {
	now := metav1.NewMicroTime(l.clock.Now())
	spec := coordinationv1.LeaseSpec{HolderIdentity: ptr.To(l.nodeName), RenewTime: &now,
		LeaseDurationSeconds: ptr.To(int32(4 * l.interval / time.Second))}
	lease := &coordinationv1.Lease{}
	err := l.reader.Get(ctx, client.ObjectKey{Namespace: l.namespace, Name: ssdv1.AgentLeaseName(l.nodeName)}, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: ssdv1.AgentLeaseName(l.nodeName)}, Spec: spec}
		return l.writer.Create(ctx, lease)
	}
	if err != nil {
		return err
	}
	lease.Spec = spec
	return l.writer.Update(ctx, lease)
}
