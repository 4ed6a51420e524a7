package v1alpha1

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// affinityPV is a PV whose required node affinity has one term per entry of
// terms, each a TopologyKeyNode In expression of that entry's values.
func affinityPV(terms ...[]string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{}
	if terms == nil {
		return pv
	}
	sel := &corev1.NodeSelector{}
	for _, values := range terms {
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: TopologyKeyNode, Operator: corev1.NodeSelectorOpIn, Values: values}},
		})
	}
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: sel}
	return pv
}

func TestPinnedNode(t *testing.T) {
	otherKey := affinityPV([]string{"node-a"})
	otherKey.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Key = "kubernetes.io/hostname"
	notIn := affinityPV([]string{"node-a"})
	notIn.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Operator = corev1.NodeSelectorOpNotIn
	for _, c := range []struct {
		name  string
		pv    *corev1.PersistentVolume
		node  string
		nodes []string
	}{
		{"one node", affinityPV([]string{"node-a"}), "node-a", []string{"node-a"}},
		{"one node named twice", affinityPV([]string{"node-a", "node-a"}, []string{"node-a"}), "node-a", []string{"node-a"}},
		{"two nodes in one term", affinityPV([]string{"node-a", "node-b"}), "", []string{"node-a", "node-b"}},
		{"two terms of different nodes", affinityPV([]string{"node-a"}, []string{"node-b"}), "", []string{"node-a", "node-b"}},
		{"no affinity", affinityPV(), "", nil},
		{"an empty value", affinityPV([]string{""}), "", nil},
		{"another key", otherKey, "", nil},
		{"operator NotIn", notIn, "", nil},
	} {
		node, nodes := PinnedNode(c.pv)
		if node != c.node || !slices.Equal(nodes, c.nodes) {
			t.Errorf("%s: PinnedNode = %q, %q; want %q, %q", c.name, node, nodes, c.node, c.nodes)
		}
	}
}
