package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

func TestAutoBindingFromStorageClass(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, fmt.Sprint(int64(100<<30)))
	cached := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamCacheSize: "10%"})
	plain := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "None"})

	// The uncached PVC is created first: by the time the cached one has its binding,
	// the controller has looked at the uncached one too (one worker, FIFO queue).
	createVolume(t, ctx, c, ns, volume{pvc: "plain", storageClass: plain, node: node, size: "50Gi"})
	pvc := createVolume(t, ctx, c, ns, volume{pvc: "fast", storageClass: cached, node: node, size: "50Gi"})

	b := waitAdmitted(t, c, ns, "fast", node, 5<<30)
	if b.Spec.PVCName != "fast" || b.Spec.Size != "10%" || b.Spec.Mode != ssdv1.ModeReadCache || b.Spec.Warmup != ssdv1.WarmupHotSet {
		t.Errorf("auto-created spec = %+v", b.Spec)
	}
	if b.Labels[ssdv1.LabelManagedBy] != ssdv1.ManagedByController {
		t.Errorf("labels = %v, want %s=%s", b.Labels, ssdv1.LabelManagedBy, ssdv1.ManagedByController)
	}
	// Owned by the PVC, so the garbage collector deletes it with the PVC.
	owner := metav1.GetControllerOf(b)
	if owner == nil || owner.Kind != "PersistentVolumeClaim" || owner.Name != "fast" || owner.UID != pvc.UID {
		t.Errorf("controller owner = %+v, want PVC fast uid %s", owner, pvc.UID)
	}
	if b.Status.VolumeHandle != "vol-fast" || b.Status.Phase != ssdv1.PhaseAdmitted || !controllerutil.ContainsFinalizer(b, ssdv1.Finalizer) {
		t.Errorf("status %+v finalizers %v", b.Status, b.Finalizers)
	}
	waitEvent(t, c, ns, "PersistentVolumeClaim", "fast", "CacheBindingCreated", "as StorageClass "+cached+" asks")
	waitEvent(t, c, ns, "CacheBinding", "fast", ssdv1.ReasonAdmitted, "admitted to node "+node+" with 5368709120 bytes")

	list := &ssdv1.CacheBindingList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Errorf("%d bindings in the namespace, want only the one of the caching class", len(list.Items))
	}
}

// TestOldSpellingsOfAClassStillCache: a class written for releases before
// 0.2 (cache-mode readcache, warmup hotset) still gets its claims a binding,
// and each claim a Warning per deprecated spelling.
func TestOldSpellingsOfAClassStillCache(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, fmt.Sprint(int64(100<<30)))
	old := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "readcache", ssdv1.ParamWarmup: "hotset", ssdv1.ParamCacheSize: "10%"})
	createVolume(t, ctx, c, ns, volume{pvc: "data", storageClass: old, node: node, size: "50Gi"})
	b := waitAdmitted(t, c, ns, "data", node, 5<<30)
	if b.Spec.Mode != ssdv1.ModeReadCache || b.Spec.Warmup != ssdv1.WarmupHotSet {
		t.Errorf("binding of the old spellings: spec %+v", b.Spec)
	}
	waitEvent(t, c, ns, "PersistentVolumeClaim", "data", "DeprecatedCacheParameters",
		`StorageClass `+old+`: parameter ssdcache.io/cache-mode: "readcache" is deprecated, write "ReadCache"`)
	waitEvent(t, c, ns, "PersistentVolumeClaim", "data", "DeprecatedCacheParameters",
		`parameter ssdcache.io/warmup: "hotset" is deprecated, write "HotSet"`)
}

func TestInvalidStorageClassParameterIsReported(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	sc := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamCacheSize: "lots"})
	createVolume(t, ctx, c, ns, volume{pvc: "data", storageClass: sc, node: node})
	waitEvent(t, c, ns, "PersistentVolumeClaim", "data", "InvalidCacheParameters", `parameter ssdcache.io/cache-size: cache size "lots"`)
	if _, err := getBinding(ctx, c, ns, "data"); client.IgnoreNotFound(err) != nil || err == nil {
		t.Errorf("a binding was created from an invalid class (err %v)", err)
	}
}

// TestBindingForExistingPVC walks a user's binding through the reasons it can wait
// for, then resizes it.
func TestBindingForExistingPVC(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "")

	createBinding(t, ctx, c, ns, "cache", "data", "2Gi")
	waitPending(t, c, ns, "cache", ssdv1.ReasonPVCNotFound, "PVC "+ns+"/data does not exist")
	waitEvent(t, c, ns, "CacheBinding", "cache", ssdv1.ReasonPVCNotFound, "does not exist")

	pvc := createVolume(t, ctx, c, ns, volume{pvc: "data", node: node, unbound: true})
	waitPending(t, c, ns, "cache", ssdv1.ReasonPVCNotBound, "waiting for it to be bound")

	bindVolume(t, ctx, c, pvc, "", node)
	waitPending(t, c, ns, "cache", ssdv1.ReasonCacheCapacityUnknown, "node "+node+" has not reported its cache capacity")

	setAnnotation(t, ctx, c, &corev1.Node{}, node, ssdv1.AnnotationCacheCapacityBytes, fmt.Sprint(int64(10<<30)))
	b := waitAdmitted(t, c, ns, "cache", node, 2<<30)
	if b.Status.VolumeHandle != "vol-data" {
		t.Errorf("volumeHandle %q, want vol-data", b.Status.VolumeHandle)
	}
	if ready := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady); ready == nil || ready.Reason != ssdv1.ReasonAttaching {
		t.Errorf("Ready = %+v, want False/Attaching until the node agent reports", ready)
	}

	update(t, ctx, c, b, func() { b.Spec.Size = "5%" })
	waitAdmitted(t, c, ns, "cache", node, 5<<30)
	waitEvent(t, c, ns, "CacheBinding", "cache", "Resized", "cache size is now 5368709120 bytes (was 2147483648)")

	// Growing beyond the node's capacity keeps the old size and says why.
	update(t, ctx, c, b, func() { b.Spec.Size = "11Gi" })
	waitEvent(t, c, ns, "CacheBinding", "cache", ssdv1.ReasonInsufficientCache, "cannot grow the cache to 11811160064 bytes")
	waitAdmitted(t, c, ns, "cache", node, 5<<30)
}

func TestVolumeNotCacheable(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "ebs", driver: "ebs.csi.aws.com", node: node})
	createBinding(t, ctx, c, ns, "cache", "ebs", "1Gi")
	waitPending(t, c, ns, "cache", ssdv1.ReasonVolumeNotCacheable, `not provisioned by the ssdcache.io CSI driver (driver "ebs.csi.aws.com")`)
	waitEvent(t, c, ns, "CacheBinding", "cache", ssdv1.ReasonVolumeNotCacheable, "ebs.csi.aws.com")
}

func TestDuplicateBindingWaits(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	createBinding(t, ctx, c, ns, "a-first", "data", "1Gi")
	waitAdmitted(t, c, ns, "a-first", node, 1<<30)
	createBinding(t, ctx, c, ns, "b-second", "data", "1Gi")
	waitPending(t, c, ns, "b-second", ssdv1.ReasonDuplicateBinding, "already has a cache from the older binding a-first")
}

// TestCapacityArbitration: a node's admitted caches never exceed its capacity; older
// bindings go first; freed capacity goes to the waiting ones.
func TestCapacityArbitration(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, fmt.Sprint(int64(10<<30)))
	for _, pvc := range []string{"v1", "v2", "v3"} {
		createVolume(t, ctx, c, ns, volume{pvc: pvc, node: node})
	}
	// Created within the same second, these are ordered by name: a, b, c.
	a := createBinding(t, ctx, c, ns, "a", "v1", "6Gi")
	createBinding(t, ctx, c, ns, "b", "v2", "6Gi")
	createBinding(t, ctx, c, ns, "c", "v3", "3Gi")

	waitAdmitted(t, c, ns, "a", node, 6<<30)
	waitAdmitted(t, c, ns, "c", node, 3<<30)
	waitPending(t, c, ns, "b", ssdv1.ReasonInsufficientCache,
		fmt.Sprintf("needs 6442450944 bytes of cache on node %s, which has 1073741824 of 10737418240 bytes free", node))
	waitEvent(t, c, ns, "CacheBinding", "b", ssdv1.ReasonInsufficientCache, "needs 6442450944 bytes")
	checkNodeWithinCapacity(t, ctx, c, ns, node, 10<<30)

	// Deleting a: the node agent detaches and removes the finalizer; b then fits.
	if err := c.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	removeFinalizer(t, ctx, c, a, ssdv1.Finalizer)
	waitGone(t, c, a)
	waitAdmitted(t, c, ns, "b", node, 6<<30)
	checkNodeWithinCapacity(t, ctx, c, ns, node, 10<<30)

	// More capacity reported by the node admits a newcomer that did not fit.
	createVolume(t, ctx, c, ns, volume{pvc: "v4", node: node})
	createBinding(t, ctx, c, ns, "d", "v4", "4Gi")
	waitPending(t, c, ns, "d", ssdv1.ReasonInsufficientCache, "needs 4294967296 bytes")
	setAnnotation(t, ctx, c, &corev1.Node{}, node, ssdv1.AnnotationCacheCapacityBytes, fmt.Sprint(int64(13<<30)))
	waitAdmitted(t, c, ns, "d", node, 4<<30)
	checkNodeWithinCapacity(t, ctx, c, ns, node, 13<<30)
}

func checkNodeWithinCapacity(t *testing.T, ctx context.Context, c client.Client, ns, node string, capacity int64) {
	t.Helper()
	list := &ssdv1.CacheBindingList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, b := range list.Items {
		if b.Status.NodeName == node {
			sum += b.Status.ResolvedSizeBytes
		}
	}
	if sum > capacity {
		t.Errorf("bindings admitted to %s take %d bytes, more than its %d", node, sum, capacity)
	}
}

// TestDeletionWithFinalizer: an admitted binding waits for its node agent; one that
// was never admitted is released by the controller.
func TestDeletionWithFinalizer(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	attached := createBinding(t, ctx, c, ns, "attached", "data", "1Gi")
	waitAdmitted(t, c, ns, "attached", node, 1<<30)
	never := createBinding(t, ctx, c, ns, "never", "missing", "1Gi")
	waitPending(t, c, ns, "never", ssdv1.ReasonPVCNotFound, "does not exist")
	if !controllerutil.ContainsFinalizer(never, ssdv1.Finalizer) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(never), never); err != nil || !controllerutil.ContainsFinalizer(never, ssdv1.Finalizer) {
			t.Fatalf("finalizer not added: %v %v", never.Finalizers, err)
		}
	}

	// Deleted in this order, the controller sees "attached" before "never"; once
	// "never" is released, it has decided about "attached" and kept the finalizer.
	if err := c.Delete(ctx, attached); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, never); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, never)
	waitEvent(t, c, ns, "CacheBinding", "never", "FinalizerRemoved", "was not admitted to a node")
	if err := c.Get(ctx, client.ObjectKeyFromObject(attached), attached); err != nil {
		t.Fatalf("admitted binding went away without its node agent: %v", err)
	}
	if !controllerutil.ContainsFinalizer(attached, ssdv1.Finalizer) || attached.DeletionTimestamp.IsZero() {
		t.Fatalf("admitted binding: finalizers %v deletion %v, want the finalizer kept while deleting", attached.Finalizers, attached.DeletionTimestamp)
	}
	removeFinalizer(t, ctx, c, attached, ssdv1.Finalizer) // what the node agent does after detaching
	waitGone(t, c, attached)
}

// TestPVCDeletion: the binding of a deleted PVC loses its admission, and then (as the
// garbage collector would do for an auto-created one) goes without a node agent.
func TestPVCDeletion(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	pvc := createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	b := createBinding(t, ctx, c, ns, "cache", "data", "1Gi")
	waitAdmitted(t, c, ns, "cache", node, 1<<30)

	if err := c.Delete(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	// kubernetes.io/pvc-protection holds the PVC while pods use it; the cache stays.
	if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err == nil && len(pvc.Finalizers) > 0 {
		t.Logf("PVC held by finalizers %v while deleting; the binding stays admitted", pvc.Finalizers)
		waitAdmitted(t, c, ns, "cache", node, 1<<30)
		removeFinalizer(t, ctx, c, pvc, "kubernetes.io/pvc-protection") // the PVC protection controller's part
	}
	waitGone(t, c, pvc)
	waitPending(t, c, ns, "cache", ssdv1.ReasonPVCNotFound, "does not exist")
	waitEvent(t, c, ns, "CacheBinding", "cache", "AdmissionRevoked", "no longer admitted to node "+node)

	if err := c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, b)
}

// TestNodeGoingAway: bindings of a deleted Node lose their admission, and those being
// deleted are released since no node agent is left to do it.
func TestNodeGoingAway(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "v1", node: node})
	createVolume(t, ctx, c, ns, volume{pvc: "v2", node: node})
	kept := createBinding(t, ctx, c, ns, "kept", "v1", "1Gi")
	deleting := createBinding(t, ctx, c, ns, "deleting", "v2", "1Gi")
	waitAdmitted(t, c, ns, "kept", node, 1<<30)
	waitAdmitted(t, c, ns, "deleting", node, 1<<30)
	if err := c.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}

	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, c, deleting)
	waitEvent(t, c, ns, "CacheBinding", "deleting", "FinalizerRemoved", "node "+node+" no longer exists")
	waitPending(t, c, ns, "kept", ssdv1.ReasonNodeUnknown, "node "+node+" does not exist")
	waitEvent(t, c, ns, "CacheBinding", "kept", "AdmissionRevoked", "no longer admitted to node "+node)
	if err := c.Get(ctx, client.ObjectKeyFromObject(kept), kept); err != nil || kept.Status.VolumeHandle != "" {
		t.Errorf("revoked binding: err %v, volumeHandle %q, want none", err, kept.Status.VolumeHandle)
	}
}

// TestDeviceClassMustMatchTheNode: a class asking for a device class the
// volume's node has no pool of gets a binding that says so, and the PVC gets
// the same Warning.
func TestDeviceClassMustMatchTheNode(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	setAnnotation(t, ctx, c, &corev1.Node{}, node, ssdv1.AnnotationDeviceClass, "nvme")
	optane := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamDeviceClass: "optane"})
	nvme := createStorageClass(t, ctx, c, map[string]string{ssdv1.ParamCacheMode: "ReadCache", ssdv1.ParamDeviceClass: "nvme"})
	createVolume(t, ctx, c, ns, volume{pvc: "fast", storageClass: optane, node: node, size: "50Gi"})
	createVolume(t, ctx, c, ns, volume{pvc: "ok", storageClass: nvme, node: node, size: "50Gi"})
	waitPending(t, c, ns, "fast", ssdv1.ReasonDeviceClassUnavailable, `spec.deviceClass is "optane", but the cache pool of node `+node+` (where the volume is) is of class "nvme"`)
	waitEvent(t, c, ns, "PersistentVolumeClaim", "fast", ssdv1.ReasonDeviceClassUnavailable, "the volume has no cache yet")
	b := waitAdmitted(t, c, ns, "ok", node, 5<<30)
	if b.Spec.DeviceClass != "nvme" {
		t.Errorf("binding of the nvme class has deviceClass %q", b.Spec.DeviceClass)
	}
}

// The controller under test reads node agents' Leases here and takes an agent
// whose Lease expired more than agentGoneAfter ago as gone.
const (
	agentLeaseNamespace = "ssdcache-agents"
	agentGoneAfter      = 20 * time.Second
)

// TestGoneAgentReleasesItsBindings: a binding being deleted on a node whose
// agent renews its Lease (the agent's own renewer) waits for the agent; on a
// node whose agent's Lease expired long ago the controller releases it, with
// a Warning that says why.
func TestGoneAgentReleasesItsBindings(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentLeaseNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	live, gone := createNode(t, ctx, c, "1000000000000"), createNode(t, ctx, c, "1000000000000")
	if err := agent.NewLeaseRenewer(c, c, agentLeaseNamespace, live, 0, nil).Renew(ctx); err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	expired := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: agentLeaseNamespace, Name: ssdv1.AgentLeaseName(gone)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(gone), RenewTime: &old, LeaseDurationSeconds: ptr.To(int32(40))}}
	if err := c.Create(ctx, expired); err != nil {
		t.Fatal(err)
	}
	createVolume(t, ctx, c, ns, volume{pvc: "on-live", node: live})
	createVolume(t, ctx, c, ns, volume{pvc: "on-gone", node: gone})
	waiting := createBinding(t, ctx, c, ns, "waiting", "on-live", "1Gi")
	released := createBinding(t, ctx, c, ns, "released", "on-gone", "1Gi")
	waitAdmitted(t, c, ns, "waiting", live, 1<<30)
	waitAdmitted(t, c, ns, "released", gone, 1<<30)
	for _, b := range []client.Object{waiting, released} {
		if err := c.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, c, released)
	waitEvent(t, c, ns, "CacheBinding", "released", "FinalizerRemoved", "the node agent of node "+gone+" has not renewed its Lease")
	if err := c.Get(ctx, client.ObjectKeyFromObject(waiting), waiting); err != nil || !controllerutil.ContainsFinalizer(waiting, ssdv1.Finalizer) {
		t.Fatalf("binding on the node of a live agent: %v, finalizers %v; want it waiting for the agent", err, waiting.Finalizers)
	}
	removeFinalizer(t, ctx, c, waiting, ssdv1.Finalizer) // what the live agent does after detaching
	waitGone(t, c, waiting)
}

// TestNewerBindingWaitsForTheOlderToDetach: the older of two bindings of one
// PVC is deleted while admitted; the newer waits until the older's agent has
// detached its cache and released it, so that detach cannot hit the newer's cache.
func TestNewerBindingWaitsForTheOlderToDetach(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	older := createBinding(t, ctx, c, ns, "a-older", "data", "1Gi")
	waitAdmitted(t, c, ns, "a-older", node, 1<<30)
	createBinding(t, ctx, c, ns, "b-newer", "data", "1Gi")
	waitPending(t, c, ns, "b-newer", ssdv1.ReasonDuplicateBinding, "already has a cache from the older binding a-older")
	if err := c.Delete(ctx, older); err != nil {
		t.Fatal(err)
	}
	waitPending(t, c, ns, "b-newer", ssdv1.ReasonDuplicateBinding, "the older binding a-older of PVC data is being deleted")
	removeFinalizer(t, ctx, c, older, ssdv1.Finalizer) // the agent detached the older cache
	waitGone(t, c, older)
	waitAdmitted(t, c, ns, "b-newer", node, 1<<30)
}

// TestNamespaceCacheLimit: an operator's limit on a namespace keeps its
// bindings within it, however much the node has; raising it admits the waiting one.
func TestNamespaceCacheLimit(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	setAnnotation(t, ctx, c, &corev1.Namespace{}, ns, ssdv1.AnnotationNamespaceCacheLimit, "2Gi")
	node := createNode(t, ctx, c, "1000000000000")
	createVolume(t, ctx, c, ns, volume{pvc: "a", node: node})
	createVolume(t, ctx, c, ns, volume{pvc: "b", node: node})
	createBinding(t, ctx, c, ns, "a", "a", "1Gi")
	waitAdmitted(t, c, ns, "a", node, 1<<30)
	createBinding(t, ctx, c, ns, "b", "b", "1536Mi")
	waitPending(t, c, ns, "b", ssdv1.ReasonNamespaceCacheLimit,
		"namespace "+ns+" may use 2147483648 bytes of cache (annotation ssdcache.io/cache-bytes-limit); its other bindings have 1073741824, this one needs 1610612736")
	waitEvent(t, c, ns, "CacheBinding", "b", ssdv1.ReasonNamespaceCacheLimit, "may use 2147483648 bytes")
	setAnnotation(t, ctx, c, &corev1.Namespace{}, ns, ssdv1.AnnotationNamespaceCacheLimit, "3Gi")
	waitAdmitted(t, c, ns, "b", node, 1536<<20)
}
