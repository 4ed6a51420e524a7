package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// PinnedNode is the one rule for which node holds a volume of this driver,
// shared by the controller (admission, the claim's node label) and the node
// agent (whose volumes it grows): the node a PV's required node affinity
// names on TopologyKeyNode with operator In, when it names exactly one.
// node is "" when the affinity names none, or several (a PV written by hand:
// the driver's own PVs name the node that created the volume), and then no
// node holds the volume as far as ssdcache is concerned; an agent that took
// any named node for its own could grow a volume it does not hold. nodes is
// every distinct node named, in order, for saying why (nil when none).
//
// The CSI node plugin reports the Kubernetes node name as the topology
// value, so node is also the Node object's name.
func PinnedNode(pv *corev1.PersistentVolume) (node string, nodes []string) {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return "", nil
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, expr := range term.MatchExpressions {
			if expr.Key != TopologyKeyNode || expr.Operator != corev1.NodeSelectorOpIn {
				continue
			}
			for _, v := range expr.Values {
				if v != "" && !slices.Contains(nodes, v) {
					nodes = append(nodes, v)
				}
			}
		}
	}
	if len(nodes) != 1 {
		return "", nodes
	}
	return nodes[0], nodes
}
