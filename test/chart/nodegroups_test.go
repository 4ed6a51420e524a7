package chart

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

func nodeGroup(name string, selector map[string]any) map[string]any {
	return map[string]any{"name": name, "nodeSelector": selector, "originSelector": map[string]any{"rotational": true}}
}

// Two groups whose node selectors certainly meet on a node (the same, one
// containing the other, a group that adds nothing to node.nodeSelector)
// would run two plugins there, sharing its CSI socket and its volume
// groups: refused, naming both groups and their selectors (#38 item 5).
func TestOverlappingNodeGroupsAreRefused(t *testing.T) {
	ch := loadChart(t)
	groups := func(g ...any) map[string]any { return map[string]any{"node": map[string]any{"nodeGroups": g}} }
	a := nodeGroup("a", map[string]any{"ssdcache.io/group": "a"})
	aInZone := nodeGroup("b", map[string]any{"ssdcache.io/group": "a", "topology.kubernetes.io/zone": "z1"})
	const (
		selA      = "kubernetes.io/os=linux,ssdcache.io/group=a,ssdcache.io/node=true"
		selAInZ1  = "kubernetes.io/os=linux,ssdcache.io/group=a,ssdcache.io/node=true,topology.kubernetes.io/zone=z1"
		everyNode = "kubernetes.io/os=linux,ssdcache.io/node=true"
	)
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"the same selector", groups(a, nodeGroup("b", map[string]any{"ssdcache.io/group": "a"})),
			"node.nodeGroups a and b select the same nodes (nodeSelector " + selA + "): each node would run two plugins sharing its CSI socket and its volume groups"},
		{"one selector within the other", groups(a, aInZone),
			"node.nodeGroups a (nodeSelector " + selA + ") selects every node that b (nodeSelector " + selAInZ1 + ") selects: those nodes would run two plugins sharing their CSI socket and their volume groups; give a a label that b's nodes lack"},
		{"the other way round", groups(aInZone, a),
			"node.nodeGroups a (nodeSelector " + selA + ") selects every node that b (nodeSelector " + selAInZ1 + ") selects"},
		{"a group without a selector of its own", groups(nodeGroup("all", map[string]any{"ssdcache.io/node": "true"}), a),
			"node.nodeGroups all (nodeSelector " + everyNode + ") selects every node that a (nodeSelector " + selA + ") selects (its nodeSelector adds nothing to node.nodeSelector)"},
		{"a group selecting the OS only", groups(a, nodeGroup("linux", map[string]any{"kubernetes.io/os": "linux"})),
			"node.nodeGroups linux (nodeSelector " + everyNode + ") selects every node that a"},
		{"too many ways to tell groups apart", groups(manyGroups(8)...), "node.nodeGroups g0: keeping off the nodes of the groups it may share nodes with takes 128 node affinity terms (at most 64)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderValues(ch, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant %q", err, c.want)
			}
		})
	}
}

// manyGroups are n groups, each told from the others by two labels of its own.
func manyGroups(n int) []any {
	var out []any
	for i := range n {
		out = append(out, nodeGroup(fmt.Sprintf("g%d", i), map[string]any{fmt.Sprintf("rack-%d", i): "yes", fmt.Sprintf("row-%d", i): "yes"}))
	}
	return out
}

// Groups whose nodes meet only where a node carries both groups' labels
// keep off each other's nodes: whatever labels a node has, at most one
// node plugin runs on it; a node of one group only runs that group's; a
// node of two runs neither (NOTES.txt lists them). node.affinity still holds.
func TestOverlappingNodeGroupsAreMadeDisjoint(t *testing.T) {
	ch := loadChart(t)
	userAffinity := map[string]any{"nodeAffinity": map[string]any{
		"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{
			map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}},
			map[string]any{"matchExpressions": []any{map[string]any{"key": "ssdcache.io/arch-ok", "operator": "Exists"}}},
		}},
		"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": 10, "preference": map[string]any{
			"matchExpressions": []any{map[string]any{"key": "fast", "operator": "In", "values": []any{"yes"}}}}}},
	}}
	for _, c := range []struct {
		name     string
		values   map[string]any
		affinity bool // node.affinity is given
	}{
		{"the chart README's groups: a label and a hostname", chartReadmeGroups(t), false},
		{"labels of several keys, node.affinity", map[string]any{"node": map[string]any{"affinity": userAffinity, "nodeGroups": []any{
			nodeGroup("rack", map[string]any{"rack": "r1"}),
			nodeGroup("hot", map[string]any{"zone": "z1", "tier": "hot"}),
			nodeGroup("cold", map[string]any{"tier": "cold"}),
			nodeGroup("big", map[string]any{"disks": "big", "zone": "z1"}),
		}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := renderValues(ch, c.values)
			if err != nil {
				t.Fatal(err)
			}
			var sets []*appsv1.DaemonSet
			for _, o := range r.ofKind("DaemonSet") {
				sets = append(sets, typed[appsv1.DaemonSet](t, o))
			}
			groups := c.values["node"].(map[string]any)["nodeGroups"].([]any)
			if len(sets) != len(groups) {
				t.Fatalf("%d DaemonSets for %d groups", len(sets), len(groups))
			}
			// Every combination of the values the selectors name, plus
			// another value and none, of every key they use.
			keys := map[string][]string{"kubernetes.io/arch": {"amd64"}, "ssdcache.io/arch-ok": {"y"}}
			for _, ds := range sets {
				for k, v := range ds.Spec.Template.Spec.NodeSelector {
					keys[k] = append(keys[k], v)
				}
			}
			nodes := []map[string]string{{}}
			for _, k := range slices.Sorted(maps.Keys(keys)) {
				var next []map[string]string
				for _, n := range nodes {
					for _, v := range append(slices.Compact(slices.Sorted(slices.Values(keys[k]))), "other", "") {
						m := maps.Clone(n)
						if v != "" {
							m[k] = v
						}
						next = append(next, m)
					}
				}
				nodes = next
			}
			for _, node := range nodes {
				var running, groupsOf []string
				for i, ds := range sets {
					if schedulable(t, ds, node) {
						running = append(running, ds.Name)
					}
					if labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).Matches(labels.Set(node)) {
						groupsOf = append(groupsOf, sets[i].Name)
					}
				}
				affinityOK := !c.affinity || node["kubernetes.io/arch"] == "amd64" || node["ssdcache.io/arch-ok"] != ""
				var want []string
				if len(groupsOf) == 1 && affinityOK {
					want = groupsOf
				}
				if !slices.Equal(running, want) {
					t.Errorf("node %v (of %v) runs %v, want %v", node, groupsOf, running, want)
				}
			}
			if c.affinity {
				for _, ds := range sets {
					if p := ds.Spec.Template.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(p) != 1 || p[0].Weight != 10 {
						t.Errorf("DaemonSet %s lost node.affinity's preference: %+v", ds.Name, p)
					}
				}
			}
		})
	}
	// Groups told apart by one label's values need no affinity.
	for _, o := range render(t, "testdata/fleet.yaml").ofKind("DaemonSet") {
		if ds := typed[appsv1.DaemonSet](t, o); ds.Spec.Template.Spec.Affinity != nil {
			t.Errorf("DaemonSet %s has affinity %+v, want none", ds.Name, ds.Spec.Template.Spec.Affinity)
		}
	}
}

// schedulable says whether the DaemonSet controller places a pod of ds on a
// node with these labels: its nodeSelector, and one of its required node
// affinity terms (an empty term matches nothing, as in Kubernetes).
func schedulable(t *testing.T, ds *appsv1.DaemonSet, node map[string]string) bool {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node)) {
		return false
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	ops := map[corev1.NodeSelectorOperator]selection.Operator{corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) == 0 || len(term.MatchFields) != 0 {
			continue
		}
		sel := labels.NewSelector()
		for _, e := range term.MatchExpressions {
			op, ok := ops[e.Operator]
			if !ok {
				t.Fatalf("DaemonSet %s: operator %s", ds.Name, e.Operator)
			}
			values := slices.Clone(e.Values)
			sort.Strings(values)
			req, err := labels.NewRequirement(e.Key, op, values)
			if err != nil {
				t.Fatalf("DaemonSet %s: %v", ds.Name, err)
			}
			sel = sel.Add(*req)
		}
		if sel.Matches(labels.Set(node)) {
			return true
		}
	}
	return false
}
