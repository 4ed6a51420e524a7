package api

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/controller"
)

// TestControllerLabelsClaimsWithTheirNode (issue 37 point 5): the
// controller labels each claim bound to one of this driver's volumes with
// the node the volume is pinned to, as it labels the bindings; it puts the
// label back when a user changes or removes it, and removes it once the
// claim's volume is gone. Claims of other drivers' volumes and unbound ones
// get none.
func TestControllerLabelsClaimsWithTheirNode(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })
	nodeA, nodeB := createNode(t, ctx, c, ""), createNode(t, ctx, c, "")
	ebs := createVolume(t, ctx, c, ns, volume{pvc: "ebs", driver: "ebs.csi.aws.com", node: nodeA})
	unbound := createVolume(t, ctx, c, ns, volume{pvc: "unbound", unbound: true})
	onA := createVolume(t, ctx, c, ns, volume{pvc: "on-a", node: nodeA})
	onB := createVolume(t, ctx, c, ns, volume{pvc: "on-b", node: nodeB})
	waitNodeLabel(t, c, onA, nodeA)
	waitNodeLabel(t, c, onB, nodeB)

	for _, tampered := range []string{`"` + nodeB + `"`, "null"} {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+ssdv1.LabelNode+`":`+tampered+`}}}`))
		if err := c.Patch(ctx, onA.DeepCopy(), patch); err != nil {
			t.Fatal(err)
		}
		waitNodeLabel(t, c, onA, nodeA)
	}
	// By now the controller has long seen the claims created before.
	for _, pvc := range []*corev1.PersistentVolumeClaim{ebs, unbound} {
		if got := nodeLabel(t, ctx, c, pvc); got != nil {
			t.Errorf("claim %s is labelled %s=%s; want no label (not a volume of %s pinned to a node)", pvc.Name, ssdv1.LabelNode, *got, ssdv1.DriverName)
		}
	}

	deletePVs(t, c, onA.Spec.VolumeName)
	waitNodeLabel(t, c, onA, "")
}

// TestControllerReportsAClaimOfAVolumeOfSeveralNodes (issue 37 point 5): a
// PV of this driver whose required affinity allows two nodes can only be a
// static PV written by hand (a volume lives on one node, which the PV does
// not say), so the controller labels its claim with neither node and reports
// it with a Warning Event on the claim naming the PV and the one-node form;
// a claim pinned to one node beside it is labelled as usual.
func TestControllerReportsAClaimOfAVolumeOfSeveralNodes(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })
	nodeA, nodeB := createNode(t, ctx, c, ""), createNode(t, ctx, c, "")
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	static := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeName: "pv-" + ns + "-static", Resources: corev1.VolumeResourceRequirements{Requests: size}},
		Status: corev1.PersistentVolumeClaimStatus{Capacity: size},
	}
	pv := pinnedVolume(static, nodeA)
	pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{nodeA, nodeB}
	create(t, ctx, c, pv)
	create(t, ctx, c, static)
	static.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: static.Spec.AccessModes, Capacity: size}
	if err := c.Status().Update(ctx, static); err != nil {
		t.Fatal(err)
	}
	pinned := createVolume(t, ctx, c, ns, volume{pvc: "pinned", node: nodeA, size: "1Gi"})

	waitEvent(t, c, ns, "PersistentVolumeClaim", static.Name, controller.EventVolumeNotPinned,
		fmt.Sprintf("PV %s may live on several nodes [%s %s]", pv.Name, nodeA, nodeB))
	waitEvent(t, c, ns, "PersistentVolumeClaim", static.Name, controller.EventVolumeNotPinned,
		"{key: "+ssdv1.TopologyKeyNode+", operator: In, values: [<node>]}")
	waitNodeLabel(t, c, pinned, nodeA)
	if got := nodeLabel(t, ctx, c, static); got != nil {
		t.Errorf("claim %s of a PV allowing nodes %s and %s is labelled %s=%s; want no label", static.Name, nodeA, nodeB, ssdv1.LabelNode, *got)
	}
}

// TestNodePluginCachesOnlyItsNodesClaims (issue 37 point 5): node A's
// plugin, with agent.CacheOptions, caches only the claims the controller
// labelled with node A, not node B's. A claim that asks for more before the
// controller knows its node (its PV appears later) is not in A's cache
// then; once the controller labels it, A's resizer sees it and grows its
// volume.
func TestNodePluginCachesOnlyItsNodesClaims(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })
	nodeA, nodeB := createNode(t, ctx, c, ""), createNode(t, ctx, c, "")
	sc := create(t, ctx, c, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("sc")}, Provisioner: ssdv1.DriverName,
		AllowVolumeExpansion: ptr.To(true)}).Name
	mine := createVolume(t, ctx, c, ns, volume{pvc: "mine", node: nodeA, size: "1Gi", storageClass: sc})
	theirs := createVolume(t, ctx, c, ns, volume{pvc: "theirs", node: nodeB, size: "1Gi", storageClass: sc})
	waitNodeLabel(t, c, mine, nodeA)
	waitNodeLabel(t, c, theirs, nodeB)
	late := growingClaimWithoutVolume(t, ctx, c, ns, "late", sc)

	cached := startResizer(t, ctx, nodeA)
	if got := cachedClaims(t, ctx, cached, ns); !slices.Equal(got, []string{"mine"}) {
		t.Errorf("node A's cache holds claims %v of namespace %s; want only [mine], labelled with node A", got, ns)
	}

	create(t, ctx, c, pinnedVolume(late, nodeA))
	waitNodeLabel(t, c, late, nodeA)
	waitGrown(t, c, late, "2Gi", "the resizer of node A growing "+late.Name+" to 2Gi once labelled")
	if got := cachedClaims(t, ctx, cached, ns); !slices.Equal(got, []string{"late", "mine"}) {
		t.Errorf("node A's cache holds claims %v of namespace %s; want [late mine]", got, ns)
	}
}

// growingClaimWithoutVolume creates a claim of class sc bound (as far as its
// status says) to a PV that does not exist yet, with 1Gi and asking for
// 2Gi: the controller cannot know its node, so it carries no node label.
func growingClaimWithoutVolume(t *testing.T, ctx context.Context, c client.Client, ns, name, sc string) *corev1.PersistentVolumeClaim {
	t.Helper()
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pvc := create(t, ctx, c, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc, VolumeName: "pv-" + ns + "-" + name, Resources: corev1.VolumeResourceRequirements{Requests: size}},
	})
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes, Capacity: size}
	if err := c.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	setRequest(t, ctx, c, pvc, "2Gi")
	if got := nodeLabel(t, ctx, c, pvc); got != nil {
		t.Fatalf("claim %s, whose PV does not exist, is labelled with node %q", name, *got)
	}
	return pvc
}

// pinnedVolume is the PV of this driver the claim names, pinned to node and
// bound to the claim, of the claim's size before it asked for more.
func pinnedVolume(pvc *corev1.PersistentVolumeClaim, node string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:         pvc.Status.Capacity,
			AccessModes:      pvc.Spec.AccessModes,
			StorageClassName: ptr.Deref(pvc.Spec.StorageClassName, ""),
			ClaimRef:         &corev1.ObjectReference{Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: ssdv1.DriverName, VolumeHandle: "vol-" + pvc.Name},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
}

// startResizer runs node's volume resizer alone, with growAsAsked as its
// expander, in a manager caching as ssdcache-node does, and returns that
// manager's synced cache.
func startResizer(t *testing.T, ctx context.Context, node string) client.Reader {
	t.Helper()
	mgr, err := ctrl.NewManager(shared.env.Config, ctrl.Options{Scheme: shared.client.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      agent.CacheOptions(node)})
	if err != nil {
		t.Fatal(err)
	}
	resizer := agent.NewResizeReconciler(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("test"), growAsAsked{}, ssdv1.DriverName, node)
	if err := resizer.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	mgrCtx, stop := context.WithCancel(ctx)
	go func() { stopped <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() { stop(); <-stopped })
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the node's cache did not sync")
	}
	return mgr.GetCache()
}

// cachedClaims lists the names of the claims of ns that reader holds, sorted.
func cachedClaims(t *testing.T, ctx context.Context, reader client.Reader, ns string) []string {
	t.Helper()
	list := &corev1.PersistentVolumeClaimList{}
	if err := reader.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// nodeLabel returns the node label of pvc on the API server, nil when unset.
func nodeLabel(t *testing.T, ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim) *string {
	t.Helper()
	got := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Labels[ssdv1.LabelNode]; ok {
		return &v
	}
	return nil
}

// waitNodeLabel waits for the controller to label pvc with node ("" waits
// for no label).
func waitNodeLabel(t *testing.T, c client.Client, pvc *corev1.PersistentVolumeClaim, node string) {
	t.Helper()
	eventually(t, fmt.Sprintf("claim %s labelled %s=%q", pvc.Name, ssdv1.LabelNode, node), func(ctx context.Context) error {
		got := &corev1.PersistentVolumeClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
			return err
		}
		v, ok := got.Labels[ssdv1.LabelNode]
		if v != node || ok != (node != "") {
			return fmt.Errorf("labels %v", got.Labels)
		}
		return nil
	})
}
