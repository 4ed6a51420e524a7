package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// pendingError is a reason a binding cannot be admitted that the user must see in the
// Pending condition, as opposed to an API error that is retried.
type pendingError struct {
	reason  string
	message string
}

func (e *pendingError) Error() string { return e.reason + ": " + e.message }

func pending(reason, format string, args ...any) *pendingError {
	return &pendingError{reason: reason, message: fmt.Sprintf(format, args...)}
}

// target is where a binding's cache would go: the volume behind its PVC and the node
// that volume lives on.
type target struct {
	nodeName     string
	volumeHandle string
	volumeBytes  int64
}

// resolveTarget follows PVC -> PV -> node. It returns a *pendingError when the chain
// is incomplete for a reason the user can act on.
func resolveTarget(ctx context.Context, c client.Reader, b *ssdv1.CacheBinding) (target, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PVCName}, pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return target{}, pending(ssdv1.ReasonPVCNotFound, "PVC %s/%s does not exist", b.Namespace, b.Spec.PVCName)
		}
		return target{}, err
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return target{}, pending(ssdv1.ReasonPVCNotBound, "PVC %s is %s, waiting for it to be bound to a volume", pvc.Name, claimPhase(pvc))
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		if apierrors.IsNotFound(err) {
			return target{}, pending(ssdv1.ReasonPVCNotBound, "PV %s of PVC %s does not exist", pvc.Spec.VolumeName, pvc.Name)
		}
		return target{}, err
	}
	t, err := targetFromPV(pv)
	if err != nil {
		return target{}, err
	}
	return t, nil
}

func claimPhase(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Status.Phase == "" {
		return "not bound yet"
	}
	return string(pvc.Status.Phase)
}

// targetFromPV checks that the volume is one of ours and pinned to a single node.
func targetFromPV(pv *corev1.PersistentVolume) (target, error) {
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != ssdv1.DriverName {
		return target{}, pending(ssdv1.ReasonVolumeNotCacheable,
			"PV %s is not provisioned by the %s CSI driver (driver %q); only its volumes can be cached",
			pv.Name, ssdv1.DriverName, pvDriver(pv))
	}
	node, err := nodeFromAffinity(pv)
	if err != nil {
		return target{}, err
	}
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	return target{nodeName: node, volumeHandle: pv.Spec.CSI.VolumeHandle, volumeBytes: capacity.Value()}, nil
}

func pvDriver(pv *corev1.PersistentVolume) string {
	if pv.Spec.CSI == nil {
		return "none: not a CSI volume"
	}
	return pv.Spec.CSI.Driver
}

// nodeFromAffinity is the node pv is pinned to (ssdv1.PinnedNode, the rule the
// node agent uses too), or a pendingError saying why there is none.
func nodeFromAffinity(pv *corev1.PersistentVolume) (string, error) {
	node, nodes := ssdv1.PinnedNode(pv)
	switch {
	case node != "":
		return node, nil
	case len(nodes) == 0:
		return "", pending(ssdv1.ReasonVolumeNotCacheable,
			"PV %s has no required node affinity on %s, so the node holding it is unknown", pv.Name, ssdv1.TopologyKeyNode)
	}
	return "", pending(ssdv1.ReasonVolumeNotCacheable,
		"PV %s may live on several nodes %v; a cache needs a volume pinned to one node", pv.Name, nodes)
}

// nodeCacheOf returns the cache pool a node reported through its annotations,
// or a pending reason when it is not of deviceClass ("" takes the node's
// default class, whatever it is).
func nodeCacheOf(ctx context.Context, c client.Reader, nodeName, deviceClass string) (nodeCache, error) {
	node := &corev1.Node{}
	if err := c.Get(ctx, types.NamespacedName{Name: nodeName}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nodeCache{}, pending(ssdv1.ReasonNodeUnknown, "node %s does not exist", nodeName)
		}
		return nodeCache{}, err
	}
	n, err := parseNodeCache(node)
	if err != nil {
		return nodeCache{}, err
	}
	if class, annotation := deviceClassOf(node); deviceClass != "" && class != deviceClass {
		return nodeCache{}, pending(ssdv1.ReasonDeviceClassUnavailable,
			"spec.deviceClass is %q, but the cache pool of node %s (where the volume is) is of class %q (annotation %s)",
			deviceClass, nodeName, class, annotation)
	}
	return n, nil
}

// deviceClassOf is the device class a node's agent reported and the annotation
// it is read from. Agents write both names; one before 0.2, still running
// during an upgrade, writes only AnnotationDeviceClassDeprecated, read on a
// node without the new one.
func deviceClassOf(node *corev1.Node) (class, annotation string) {
	if class, ok := node.Annotations[ssdv1.AnnotationDeviceClass]; ok {
		return class, ssdv1.AnnotationDeviceClass
	}
	return node.Annotations[ssdv1.AnnotationDeviceClassDeprecated], ssdv1.AnnotationDeviceClassDeprecated
}

// nodeExists tells whether a Node object of that name exists.
func nodeExists(ctx context.Context, c client.Reader, nodeName string) (bool, error) {
	err := c.Get(ctx, types.NamespacedName{Name: nodeName}, &corev1.Node{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
