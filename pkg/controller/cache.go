package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// CacheOptions is what the controller's manager caches. It must hold every
// CacheBinding, claim, PV and Node of the cluster (the watches follow them
// all), so each is kept without what the controller never reads: a
// binding's spec.preloadPaths (up to 32 KiB a binding, the node agent's
// alone), and of claims, PVs and Nodes everything but the fields listed in
// trimClaim, trimVolume and trimNode (annotations such as kubectl's
// last-applied-configuration, a Node's images and conditions); and the
// managedFields of every object. The controller writes bindings with merge
// patches computed from these trimmed copies only, which leave the fields
// they lack untouched on the API server, and claims with a patch of their
// node label alone; it never writes PVs or Nodes. An Update from any of
// these copies would erase what they lack.
func CacheOptions() crcache.Options {
	return crcache.Options{
		DefaultTransform: crcache.TransformStripManagedFields(),
		ByObject: map[client.Object]crcache.ByObject{
			&ssdv1.CacheBinding{}:           {Transform: trimBinding},
			&corev1.PersistentVolumeClaim{}: {Transform: trimClaim},
			&corev1.PersistentVolume{}:      {Transform: trimVolume},
			&corev1.Node{}:                  {Transform: trimNode},
		},
	}
}

func trimBinding(o any) (any, error) {
	if b, ok := o.(*ssdv1.CacheBinding); ok {
		b.Spec.PreloadPaths = nil
		b.ManagedFields = nil
	}
	return o, nil
}

// identity is what every trimmed copy keeps of its object's metadata: enough
// to name it in a request, an Event or an owner reference.
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp}
}

// trimClaim keeps of a claim what admission (resolveTarget), the
// auto-binding (ClaimReconciler) and the labeler read: its volume, class,
// phase and node label.
func trimClaim(o any) (any, error) {
	pvc, ok := o.(*corev1.PersistentVolumeClaim)
	if !ok {
		return o, nil
	}
	kept := &corev1.PersistentVolumeClaim{TypeMeta: pvc.TypeMeta, ObjectMeta: identity(&pvc.ObjectMeta),
		Spec:   corev1.PersistentVolumeClaimSpec{VolumeName: pvc.Spec.VolumeName, StorageClassName: pvc.Spec.StorageClassName},
		Status: corev1.PersistentVolumeClaimStatus{Phase: pvc.Status.Phase}}
	if node, set := pvc.Labels[ssdv1.LabelNode]; set {
		kept.Labels = map[string]string{ssdv1.LabelNode: node}
	}
	return kept, nil
}

// trimVolume keeps of a PV its claim and driver, and of this driver's PVs
// what targetFromPV reads: the handle, the size and the node affinity.
func trimVolume(o any) (any, error) {
	pv, ok := o.(*corev1.PersistentVolume)
	if !ok {
		return o, nil
	}
	kept := &corev1.PersistentVolume{TypeMeta: pv.TypeMeta, ObjectMeta: identity(&pv.ObjectMeta)}
	if ref := pv.Spec.ClaimRef; ref != nil {
		kept.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	}
	if pv.Spec.CSI == nil {
		return kept, nil
	}
	kept.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: pv.Spec.CSI.Driver}
	if pv.Spec.CSI.Driver == ssdv1.DriverName {
		kept.Spec.CSI.VolumeHandle = pv.Spec.CSI.VolumeHandle
		if size, set := pv.Spec.Capacity[corev1.ResourceStorage]; set {
			kept.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: size}
		}
		kept.Spec.NodeAffinity = pv.Spec.NodeAffinity
	}
	return kept, nil
}

// nodeAnnotations are the annotations of a Node admission reads: those its
// agent reports its cache pool with.
var nodeAnnotations = []string{ssdv1.AnnotationCachePoolBytes, ssdv1.AnnotationCacheExtentBytes, ssdv1.AnnotationCacheBlockBytes,
	ssdv1.AnnotationCacheCapacityBytes, ssdv1.AnnotationDeviceClass, ssdv1.AnnotationDeviceClassDeprecated}

// trimNode keeps of a Node its identity and nodeAnnotations; its spec and
// status (images, conditions, addresses) are never read.
func trimNode(o any) (any, error) {
	node, ok := o.(*corev1.Node)
	if !ok {
		return o, nil
	}
	kept := &corev1.Node{TypeMeta: node.TypeMeta, ObjectMeta: identity(&node.ObjectMeta)}
	for _, a := range nodeAnnotations {
		if v, set := node.Annotations[a]; set {
			if kept.Annotations == nil {
				kept.Annotations = map[string]string{}
			}
			kept.Annotations[a] = v
		}
	}
	return kept, nil
}
