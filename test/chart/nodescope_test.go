package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestNodePluginIsHeldToItsNode applies the chart's RBAC and node-scope
// admission policy for real and acts as node A's plugin: its ServiceAccount
// with the node-name claim kubelet's token carries for a pod on node A. It
// may patch Node A, the status of a binding admitted to A, its own Lease
// and the PV of a volume on A; the same writes on node B's objects are
// refused (#14 item 8), and so is moving its binding to B (issue 37 point 4;
// test/api's TestNodeScope* cover PVs, claims and CSIStorageCapacity verb
// by verb).
func TestNodePluginIsHeldToItsNode(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	r := render(t, "")
	applyRBAC(t, ctx, c, r)
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, o := range r.ofKind(kind) {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("helm"), client.ForceOwnership); err != nil {
				t.Fatalf("%s %s: %v", kind, o.GetName(), err)
			}
		}
	}
	nodeA, nodeB := "scope-a", "scope-b"
	for _, n := range []string{nodeA, nodeB} {
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		admitBinding(t, ctx, c, "on-"+n, n)
		createNodeVolume(t, ctx, c, "pv-on-"+n, n)
	}
	asA := nodePluginClient(t, r, nodeA)
	annotate := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+ssdv1.AnnotationCacheCapacityBytes+`":"1"}}}`))
	status := client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Attached"}}`))
	binding := func(name string) *unstructured.Unstructured { return bindingRef(releaseNS, name) }
	grow := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"capacity":{"storage":"2Gi"}}}`))
	lease := func(node string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNS, Name: ssdv1.AgentLeaseName(node)}}
	}
	// The policy takes effect once the API server has loaded it.
	waitRefused(t, "patching Node "+nodeB, func() error {
		return asA.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeB}}, annotate)
	})
	refused := map[string]func() error{
		"the status of a binding admitted to " + nodeB: func() error { return asA.Status().Patch(ctx, binding("on-"+nodeB), status) },
		"the Lease of " + nodeB:                        func() error { return asA.Create(ctx, lease(nodeB)) },
		"the PV of a volume on " + nodeB:               func() error { return asA.Patch(ctx, pvRef("pv-on-"+nodeB), grow) },
		// The admission decision is the controller's (issue 37 point 4).
		"its binding's status.nodeName, to " + nodeB: func() error {
			return asA.Status().Patch(ctx, binding("on-"+nodeA), client.RawPatch(types.MergePatchType, []byte(`{"status":{"nodeName":"`+nodeB+`"}}`)))
		},
	}
	for what, write := range refused {
		if err := write(); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("node %s's plugin writing %s: err = %v, want a refusal by the node-scope policy", nodeA, what, err)
		}
	}
	allowed := map[string]func() error{
		"its Node": func() error {
			return asA.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}, annotate)
		},
		"the status of its binding": func() error { return asA.Status().Patch(ctx, binding("on-"+nodeA), status) },
		"its Lease":                 func() error { return asA.Create(ctx, lease(nodeA)) },
		"the PV of its volume":      func() error { return asA.Patch(ctx, pvRef("pv-on-"+nodeA), grow) },
	}
	for what, write := range allowed {
		if err := write(); err != nil {
			t.Errorf("node %s's plugin writing %s: %v", nodeA, what, err)
		}
	}
	noClaim := nodePluginClient(t, r, "")
	if err := noClaim.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeA}}, annotate); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("the node plugin's ServiceAccount without a node claim patched a Node: err = %v", err)
	}
}

// createNodeVolume creates a PV of the driver whose volume is on node.
func createNodeVolume(t *testing.T, ctx context.Context, c client.Client, name, node string) {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: ssdv1.DriverName, VolumeHandle: name}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}}},
	}}
	if err := c.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func pvRef(name string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// admitBinding creates a CacheBinding whose status says it is admitted to node.
func admitBinding(t *testing.T, ctx context.Context, c client.Client, name, node string) {
	t.Helper()
	b := bindingRef(releaseNS, name)
	b.Object["spec"] = map[string]any{"pvcName": "data-" + node, "size": "1Gi"}
	if err := c.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"status":{"nodeName":%q,"volumeHandle":"vol-%s","phase":"Admitted"}}`, node, node)))
	if err := c.Status().Patch(ctx, bindingRef(releaseNS, name), patch); err != nil {
		t.Fatal(err)
	}
}

func bindingRef(ns, name string) *unstructured.Unstructured {
	b := &unstructured.Unstructured{}
	b.SetAPIVersion(ssdv1.GroupVersion.String())
	b.SetKind("CacheBinding")
	b.SetNamespace(ns)
	b.SetName(name)
	return b
}

// nodePluginClient acts as the node plugin's ServiceAccount with the claims
// of a token bound to a pod on node ("" for none).
func nodePluginClient(t *testing.T, r rendered, node string) client.Client {
	t.Helper()
	ds := r.ofKind("DaemonSet")
	if len(ds) == 0 {
		t.Fatal("the chart renders no node DaemonSet")
	}
	sa, _, _ := unstructured.NestedString(ds[0].Object, "spec", "template", "spec", "serviceAccountName")
	cfg := rest.CopyConfig(apiServer.config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceAccountUser(sa),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: apiServer.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitRefused(t *testing.T, what string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := write()
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			if !strings.Contains(err.Error(), "may change only its own Node") {
				t.Fatalf("%s refused, but not by the node-scope policy: %v", what, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: err = %v after 30s, want a refusal by the node-scope policy", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
