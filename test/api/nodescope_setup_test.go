package api

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// nodeScope is one install of the chart's node RBAC (rbac-node.yaml) and
// node-scope policy (node-scope-policy.yaml) on the test's API server, under
// a release name and namespace of its own, so tests do not share a policy.
type nodeScope struct {
	namespace      string // the release namespace
	serviceAccount string // the node plugin's
	daemonSet      *unstructured.Unstructured
}

// nodeScopeTemplates are the templates installed; the DaemonSet is only read
// (its ServiceAccount and csi-provisioner's flags).
var nodeScopeTemplates = []string{"rbac-node.yaml", "node-scope-policy.yaml"}

// installNodeScope renders the chart with its defaults (and origin devices) and applies its node
// RBAC and policy, then waits until the API server enforces the policy.
func installNodeScope(t *testing.T, ctx context.Context, c client.Client) *nodeScope {
	t.Helper()
	ns := newNamespace(t, ctx, c)
	release := "r" + rand.String(5)
	ch, err := loader.Load(filepath.Join("..", "..", "charts", "ssdcache"))
	if err != nil {
		t.Fatal(err)
	}
	// Origin devices are the one value the chart cannot default.
	values := map[string]any{"node": map[string]any{"originSelector": map[string]any{"byId": "/dev/disk/by-id/ata-*"}}}
	top, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: release, Namespace: ns, IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	s := &nodeScope{namespace: ns}
	for name, text := range files {
		base := filepath.Base(name)
		if base == "node-daemonset.yaml" {
			if objs := decodeYAML(t, name, text); len(objs) > 0 {
				s.daemonSet = objs[0]
			}
		}
		if !contains(nodeScopeTemplates, base) {
			continue
		}
		objs := decodeYAML(t, name, text)
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
			if o.GetNamespace() == "" {
				t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
			}
		}
	}
	if s.daemonSet == nil {
		t.Fatal("the chart rendered no node DaemonSet")
	}
	s.serviceAccount, _, _ = unstructured.NestedString(s.daemonSet.Object, "spec", "template", "spec", "serviceAccountName")
	s.waitEnforced(t, ctx, c)
	return s
}

// waitEnforced waits until a node plugin's write of another node's Node is
// refused by the policy: the API server loads policies asynchronously.
func (s *nodeScope) waitEnforced(t *testing.T, ctx context.Context, c client.Client) {
	t.Helper()
	other := createNode(t, ctx, c, "")
	as := s.client(t, "policy-probe")
	deadline := time.Now().Add(pollTimeout)
	for {
		err := as.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"probe":"x"}}}`)))
		if err != nil && strings.Contains(err.Error(), "may change only its own Node") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node-scope policy is not enforced after %v: %v", pollTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// config is the API server as the node plugin's ServiceAccount with the
// claims of a token kubelet mounts in a pod on node ("" for none).
func (s *nodeScope) config(node string) *rest.Config {
	cfg := rest.CopyConfig(shared.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + s.namespace + ":" + s.serviceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + s.namespace, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return cfg
}

func (s *nodeScope) client(t *testing.T, node string) client.Client {
	t.Helper()
	c, err := client.New(s.config(node), client.Options{Scheme: shared.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func decodeYAML(t *testing.T, name, text string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// pinnedPV is a PV as csi-provisioner creates it for a volume on node: a CSI
// source of driver and one node selector term on the driver's topology key.
func pinnedPV(name, driver string, nodes ...string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": driver},
			Finalizers: []string{"external-provisioner.volume.kubernetes.io/finalizer"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name, FSType: "ext4"},
			},
		},
	}
	var terms []corev1.NodeSelectorTerm
	for _, n := range nodes {
		terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: ssdv1.TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}})
	}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	return pv
}

// hostPathPV is what a stolen token would make to reach a node's files: a
// hostPath PV pinned to the plugin's own node.
func hostPathPV(name, node string) *corev1.PersistentVolume {
	pv := pinnedPV(name, ssdv1.DriverName, node)
	pv.Spec.CSI = nil
	pv.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/etc"}
	return pv
}

// nodeCapacity is a CSIStorageCapacity as csi-provisioner publishes it for
// node (its labels, topology and generated name).
func nodeCapacity(ns, driver, node string) *storagev1.CSIStorageCapacity {
	return &storagev1.CSIStorageCapacity{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csisc-", Namespace: ns, Labels: map[string]string{
			"csi.storage.k8s.io/drivername": driver, "csi.storage.k8s.io/managed-by": "external-provisioner-" + node}},
		StorageClassName: "sc",
		NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{ssdv1.TopologyKeyNode: node}},
		Capacity:         ptrQuantity("10Gi"),
	}
}

func ptrQuantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// expectAllowed fails the test when a write the node plugin needs is refused.
func expectAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want it allowed", what, err)
	}
}

// expectDenied fails the test unless the node-scope policy refused the
// write with a message holding every one of want (the field, the value and
// what is allowed).
func expectDenied(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want a refusal by the node-scope policy", what)
		return
	case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
		t.Errorf("%s: %v, want a refusal by the node-scope policy", what, err)
		return
	case !strings.Contains(err.Error(), "node-scope"):
		t.Errorf("%s: refused, but not by the node-scope policy: %v", what, err)
		return
	}
	t.Logf("%s: %v", what, err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: refusal %q does not say %q", what, err, w)
		}
	}
}
