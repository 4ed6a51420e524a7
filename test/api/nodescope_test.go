package api

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// The tests below act as node A's plugin (the chart's node ServiceAccount
// with the node-name claim of a token kubelet mounts on A) against the
// chart's node RBAC and node-scope policy, one verb each (issue 37 point 4):
// A may write what belongs to its node, as csi-provisioner and the agent
// write it, and nothing of node B, no hostPath PV and no PV of another driver.

// TestNodeScopePVCreate: csi-provisioner creates the PVs of its node's
// volumes; a stolen token must not create one for another node, a hostPath
// PV or a PV of another driver.
func TestNodeScopePVCreate(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	nodeA, nodeB := uniqueName("a"), uniqueName("b")
	asA := s.client(t, nodeA)
	name := uniqueName("pv")
	t.Cleanup(func() { deletePVs(t, c, name) })

	expectAllowed(t, "creating a PV of its node", asA.Create(ctx, unfinalized(pinnedPV(name+"-own", ssdv1.DriverName, nodeA))))
	expectDenied(t, "creating a PV of node B", asA.Create(ctx, pinnedPV(name+"-b", ssdv1.DriverName, nodeB)),
		"spec.nodeAffinity.required", "In ["+nodeA+"]", "In "+nodeB)
	expectDenied(t, "creating a PV of nodes A or B", asA.Create(ctx, pinnedPV(name+"-ab", ssdv1.DriverName, nodeA, nodeB)),
		"In ["+nodeA+"]", "In "+nodeB)
	expectDenied(t, "creating a hostPath PV on its node", asA.Create(ctx, hostPathPV(name+"-hostpath", nodeA)),
		"CSI PersistentVolumes of driver "+ssdv1.DriverName, "spec.hostPath /etc")
	expectDenied(t, "creating a PV of another driver on its node", asA.Create(ctx, pinnedPV(name+"-other", "other.example.com", nodeA)),
		"CSI PersistentVolumes of driver "+ssdv1.DriverName, "spec.csi.driver other.example.com")
	expectDenied(t, "creating a PV with a token that names no node", s.client(t, "").Create(ctx, pinnedPV(name+"-none", ssdv1.DriverName, nodeA)),
		"names no node")
}

// TestNodeScopePVDelete: csi-provisioner deletes the released PVs of its
// node; not another node's, nor a hostPath PV or another driver's PV on it.
func TestNodeScopePVDelete(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	nodeA, nodeB := uniqueName("a"), uniqueName("b")
	asA := s.client(t, nodeA)
	name := uniqueName("pv")
	pvs := map[string]*corev1.PersistentVolume{
		"own": pinnedPV(name+"-own", ssdv1.DriverName, nodeA), "b": pinnedPV(name+"-b", ssdv1.DriverName, nodeB),
		"hostpath": hostPathPV(name+"-hostpath", nodeA), "other": pinnedPV(name+"-other", "other.example.com", nodeA),
	}
	for _, pv := range pvs {
		create(t, ctx, c, unfinalized(pv))
	}
	t.Cleanup(func() { deletePVs(t, c, name) })

	expectAllowed(t, "deleting a PV of its node", asA.Delete(ctx, pvRef(pvs["own"].Name)))
	expectDenied(t, "deleting a PV of node B", asA.Delete(ctx, pvRef(pvs["b"].Name)),
		"delete only CSI PersistentVolumes of driver "+ssdv1.DriverName, "In ["+nodeA+"]", "In "+nodeB)
	expectDenied(t, "deleting a hostPath PV on its node", asA.Delete(ctx, pvRef(pvs["hostpath"].Name)),
		"driver "+ssdv1.DriverName, "spec.hostPath /etc")
	expectDenied(t, "deleting a PV of another driver on its node", asA.Delete(ctx, pvRef(pvs["other"].Name)),
		"driver "+ssdv1.DriverName, "spec.csi.driver other.example.com")
}

// TestNodeScopePVUpdate: the resizer records a grown size and
// csi-provisioner patches its finalizer, on its node's PVs only.
func TestNodeScopePVUpdate(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	nodeA, nodeB := uniqueName("a"), uniqueName("b")
	asA := s.client(t, nodeA)
	name := uniqueName("pv")
	pvs := map[string]*corev1.PersistentVolume{
		"own": pinnedPV(name+"-own", ssdv1.DriverName, nodeA), "b": pinnedPV(name+"-b", ssdv1.DriverName, nodeB),
		"hostpath": hostPathPV(name+"-hostpath", nodeA), "other": pinnedPV(name+"-other", "other.example.com", nodeA),
	}
	for _, pv := range pvs {
		create(t, ctx, c, unfinalized(pv))
	}
	t.Cleanup(func() { deletePVs(t, c, name) })
	grow := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"capacity":{"storage":"2Gi"}}}`))
	finalize := client.RawPatch(types.StrategicMergePatchType, []byte(`{"metadata":{"finalizers":["external-provisioner.volume.kubernetes.io/finalizer"]}}`))

	expectAllowed(t, "growing a PV of its node", asA.Patch(ctx, pvRef(pvs["own"].Name), grow))
	expectAllowed(t, "adding csi-provisioner's finalizer to a PV of its node", asA.Patch(ctx, pvRef(pvs["own"].Name), finalize))
	expectDenied(t, "growing a PV of node B", asA.Patch(ctx, pvRef(pvs["b"].Name), grow), "In ["+nodeA+"]", "In "+nodeB)
	expectDenied(t, "adding a finalizer to a PV of node B", asA.Patch(ctx, pvRef(pvs["b"].Name), finalize), "In "+nodeB)
	expectDenied(t, "growing a hostPath PV on its node", asA.Patch(ctx, pvRef(pvs["hostpath"].Name), grow), "spec.hostPath /etc")
	expectDenied(t, "growing a PV of another driver on its node", asA.Patch(ctx, pvRef(pvs["other"].Name), grow),
		"spec.csi.driver other.example.com")
}

// TestNodeScopePVCUpdate: csi-provisioner writes claims only to take one
// for its node (immediate binding sets volume.kubernetes.io/selected-node)
// or to give one back (reschedule removes it where it names its node).
func TestNodeScopePVCUpdate(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	nodeA, nodeB := uniqueName("a"), uniqueName("b")
	asA := s.client(t, nodeA)
	ns := newNamespace(t, ctx, c)
	claim := func(name, selected string) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{
				"volume.kubernetes.io/storage-provisioner": ssdv1.DriverName}},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if selected != "" {
			pvc.Annotations[selectedNode] = selected
		}
		return create(t, ctx, c, pvc)
	}
	// update writes the claim as node A's plugin after change, as
	// csi-provisioner does (a full Update of the object it read).
	update := func(pvc *corev1.PersistentVolumeClaim, change func(*corev1.PersistentVolumeClaim)) error {
		mine := &corev1.PersistentVolumeClaim{}
		if err := asA.Get(ctx, client.ObjectKeyFromObject(pvc), mine); err != nil {
			return err
		}
		change(mine)
		return asA.Update(ctx, mine)
	}
	set := func(node string) func(*corev1.PersistentVolumeClaim) {
		return func(p *corev1.PersistentVolumeClaim) { p.Annotations[selectedNode] = node }
	}
	unset := func(p *corev1.PersistentVolumeClaim) { delete(p.Annotations, selectedNode) }

	expectAllowed(t, "selecting its node for a claim without a node", update(claim("free", ""), set(nodeA)))
	expectAllowed(t, "giving back a claim selected to its node", update(claim("mine", nodeA), unset))
	expectDenied(t, "giving back a claim selected to node B", update(claim("b", nodeB), unset),
		selectedNode, `from "`+nodeB+`" to ""`, "to "+nodeA+" on a claim without it")
	expectDenied(t, "selecting node B for a claim", update(claim("free-b", ""), set(nodeB)),
		`from "" to "`+nodeB+`"`)
	expectDenied(t, "taking a claim selected to node B", update(claim("steal", nodeB), set(nodeA)),
		`from "`+nodeB+`" to "`+nodeA+`"`)
	// Bound, of a class that allows expansion: the API server lets no other claim grow.
	expandable := create(t, ctx, c, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("sc")},
		Provisioner: ssdv1.DriverName, AllowVolumeExpansion: ptr.To(true)}).Name
	own := createVolume(t, ctx, c, ns, volume{pvc: "own", node: nodeA, size: "1Gi", storageClass: expandable})
	t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })
	setAnnotation(t, ctx, c, own, own.Name, selectedNode, nodeA)
	// The controller's label, written before update reads the claim.
	waitNodeLabel(t, c, own, nodeA)
	expectDenied(t, "growing a claim of its node", update(own, func(p *corev1.PersistentVolumeClaim) {
		p.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	}), "may change only the annotation "+selectedNode, "changes spec")
	expectDenied(t, "labelling a claim of its node", update(own, func(p *corev1.PersistentVolumeClaim) {
		p.Labels = map[string]string{"x": "y", ssdv1.LabelNode: nodeA}
	}), "changes metadata.labels")
	// The node label is the controller's: a plugin that moved it would hide
	// a claim from its node's resizer, or show it another node's.
	expectDenied(t, "removing the node label of a claim of its node", update(own, func(p *corev1.PersistentVolumeClaim) {
		delete(p.Labels, ssdv1.LabelNode)
	}), "changes metadata.labels")
	theirs := createVolume(t, ctx, c, ns, volume{pvc: "theirs", node: nodeB, size: "1Gi"})
	waitNodeLabel(t, c, theirs, nodeB)
	expectDenied(t, "labelling a claim of node B with its node", update(theirs, func(p *corev1.PersistentVolumeClaim) {
		p.Labels[ssdv1.LabelNode] = nodeA
	}), "changes metadata.labels")
	expectDenied(t, "changing another annotation of a claim of its node", update(own, func(p *corev1.PersistentVolumeClaim) {
		p.Annotations["volume.kubernetes.io/storage-provisioner"] = "other.example.com"
	}), "changes metadata.annotations[volume.kubernetes.io/storage-provisioner]")
	expectDenied(t, "adding a finalizer to a claim of its node", update(own, func(p *corev1.PersistentVolumeClaim) {
		p.Finalizers = append(p.Finalizers, "example.com/hold")
	}), "changes metadata.finalizers")
}

// TestNodeScopePVCStatusUpdate: the resizer hands a grown volume to kubelet
// through the claim's status (allocated size, resize status, condition);
// the claim's phase is the PV controller's.
func TestNodeScopePVCStatusUpdate(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	asA := s.client(t, uniqueName("a"))
	ns := newNamespace(t, ctx, c)
	pvc := createVolume(t, ctx, c, ns, volume{pvc: "data", node: "somewhere", size: "1Gi"})
	t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })

	resized := client.RawPatch(types.MergePatchType, []byte(`{"status":{"allocatedResources":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":"NodeResizePending"}}}`))
	expectAllowed(t, "recording a grown size in a claim's status", asA.Status().Patch(ctx, pvc.DeepCopy(), resized))
	lost := client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Lost"}}`))
	expectDenied(t, "marking a claim Lost", asA.Status().Patch(ctx, pvc.DeepCopy(), lost),
		"status.phase", `from "Bound" to "Lost"`, "may change only status.capacity")
}

// TestNodeScopeCSIStorageCapacity: csi-provisioner publishes its node's
// capacity (create), refreshes it (update) and removes obsolete objects
// (delete); another node's objects are not its to write.
func TestNodeScopeCSIStorageCapacity(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	nodeA, nodeB := uniqueName("a"), uniqueName("b")
	asA := s.client(t, nodeA)
	ns := s.namespace

	// Its start-up probe of the v1 API must still end in validation's
	// Invalid, not in the policy's Forbidden (csi-provisioner exits on anything else).
	probe := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "#%123-invalid-name", Namespace: ns}}
	if err := asA.Create(ctx, probe); !apierrors.IsInvalid(err) {
		t.Errorf("csi-provisioner's probe for the v1 API: err = %v, want Invalid", err)
	}

	own := nodeCapacity(ns, ssdv1.DriverName, nodeA)
	expectAllowed(t, "publishing its node's capacity", asA.Create(ctx, own))
	own.Capacity = ptrQuantity("20Gi")
	expectAllowed(t, "updating its node's capacity", asA.Update(ctx, own))
	expectDenied(t, "publishing node B's capacity", asA.Create(ctx, nodeCapacity(ns, ssdv1.DriverName, nodeB)),
		"nodeTopology exactly matchLabels {"+ssdv1.TopologyKeyNode+": "+nodeA+"}", ssdv1.TopologyKeyNode+": "+nodeB)
	expectDenied(t, "publishing another driver's capacity on its node", asA.Create(ctx, nodeCapacity(ns, "other.example.com", nodeA)),
		"label csi.storage.k8s.io/drivername="+ssdv1.DriverName, "drivername=other.example.com")
	wide := nodeCapacity(ns, ssdv1.DriverName, nodeA)
	wide.NodeTopology = &metav1.LabelSelector{}
	expectDenied(t, "publishing capacity for every node", asA.Create(ctx, wide), "nodeTopology matchLabels {}")
	if err := asA.Create(ctx, nodeCapacity(newNamespace(t, ctx, c), ssdv1.DriverName, nodeA)); !apierrors.IsForbidden(err) {
		t.Errorf("publishing capacity outside the release namespace: err = %v, want forbidden by RBAC", err)
	}

	theirs := create(t, ctx, c, nodeCapacity(ns, ssdv1.DriverName, nodeB))
	theirs.Capacity = ptrQuantity("1Ti")
	expectDenied(t, "updating node B's capacity", asA.Update(ctx, theirs), ssdv1.TopologyKeyNode+": "+nodeB)
	expectDenied(t, "deleting node B's capacity", asA.Delete(ctx, theirs), ssdv1.TopologyKeyNode+": "+nodeB)
	expectAllowed(t, "deleting its node's capacity", asA.Delete(ctx, own))
}

const selectedNode = "volume.kubernetes.io/selected-node"

func pvRef(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// unfinalized drops csi-provisioner's finalizer from a PV the test deletes:
// nothing here would remove it.
func unfinalized(pv *corev1.PersistentVolume) *corev1.PersistentVolume {
	pv.Finalizers = nil
	return pv
}

// deletePVs removes the test's PVs (those named with prefix), finalizers and all.
func deletePVs(t *testing.T, c client.Client, prefix string) {
	t.Helper()
	ctx := context.Background() // t.Context() is over when cleanups run
	list := &corev1.PersistentVolumeList{}
	if err := c.List(ctx, list); err != nil {
		t.Log(err)
		return
	}
	for i := range list.Items {
		pv := &list.Items[i]
		if len(pv.Name) < len(prefix) || pv.Name[:len(prefix)] != prefix {
			continue
		}
		if len(pv.Finalizers) > 0 {
			_ = c.Patch(ctx, pv, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
		_ = c.Delete(ctx, pv)
	}
}
