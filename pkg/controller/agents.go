package controller

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// agentLeases tells whether the node agent of a node is gone for good: its
// Lease (renewed every few seconds while it runs) expired longer ago than
// goneAfter. A node whose agent never made a Lease is not judged.
type agentLeases struct {
	reader    client.Reader
	namespace string
	goneAfter time.Duration
	clock     clock.Clock
}

func newAgentLeases(reader client.Reader, o Options) agentLeases {
	a := agentLeases{reader: reader, namespace: o.AgentLeaseNamespace, goneAfter: o.AgentGoneAfter, clock: o.Clock}
	if a.goneAfter <= 0 {
		a.goneAfter = DefaultAgentGoneAfter
	}
	if a.clock == nil {
		a.clock = clock.RealClock{}
	}
	return a
}

// recheck is how often a binding being deleted is looked at again, as the
// Leases are not watched; 0 (no requeue) when no Lease is ever read.
func (a agentLeases) recheck() time.Duration {
	if a.namespace == "" {
		return 0
	}
	return max(a.goneAfter/10, 10*time.Second)
}

// goneReason is why the agent of node is taken as gone, or "" while it may
// still come back and detach the cache itself.
func (a agentLeases) goneReason(ctx context.Context, node string) (string, error) {
	if a.namespace == "" {
		return "", nil
	}
	lease := &coordinationv1.Lease{}
	err := a.reader.Get(ctx, client.ObjectKey{Namespace: a.namespace, Name: ssdv1.AgentLeaseName(node)}, lease)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || lease.Spec.RenewTime == nil {
		return "", err
	}
	expired := lease.Spec.RenewTime.Add(time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second)
	if since := a.clock.Since(expired); since <= a.goneAfter {
		return "", nil
	}
	return fmt.Sprintf("the node agent of node %s has not renewed its Lease %s/%s since %s, more than %s ago: it is gone "+
		"(uninstalled, or the node no longer runs it), so the finalizer is released; if it returns it detaches the cache, "+
		"which no binding claims any more", node, a.namespace, lease.Name, lease.Spec.RenewTime.UTC().Format(time.RFC3339), a.goneAfter), nil
}
