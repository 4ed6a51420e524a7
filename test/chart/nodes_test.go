package chart

import (
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// The plugin is opt-in by node label and tolerates no taint by default: an
// install on a cluster of many nodes must not land on the control plane or
// on nodes without the disks (#15 item 2).
func TestNodePluginRunsOnlyOnLabelledNodes(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, render(t, "").one(t, "DaemonSet", "ssd-ssdcache-node"))
	spec := ds.Spec.Template.Spec
	want := map[string]string{"kubernetes.io/os": "linux", "ssdcache.io/node": "true"}
	if !maps.Equal(spec.NodeSelector, want) {
		t.Errorf("nodeSelector = %v, want %v", spec.NodeSelector, want)
	}
	if len(spec.Tolerations) != 0 {
		t.Errorf("tolerations = %+v, want none by default", spec.Tolerations)
	}
	if spec.Affinity != nil {
		t.Errorf("affinity = %+v, want none by default", spec.Affinity)
	}
	mustHaveArgs(t, container(t, spec, "ssdcache-node"), "--pool-retry-interval=30s")
}

// Two groups of nodes with other disks: each DaemonSet runs on its group's
// labelled nodes, with its own selectors, which ssdcache-node parses back to
// what the values say.
func TestTwoNodeGroupsWithDeviceSelectors(t *testing.T) {
	r := render(t, "testdata/fleet.yaml")
	if sets := r.ofKind("DaemonSet"); len(sets) != 2 {
		t.Fatalf("DaemonSets = %v, want one per group", r.names())
	}
	for _, g := range []struct {
		name, group    string
		args, notArgs  []string
		originSelector string
		cacheSelector  string
	}{
		{"ssd-ssdcache-node-seagate", "seagate",
			[]string{"--device-class=nvme", "--pool-retry-interval=10s"},
			[]string{"--origin-devices=", "--cache-devices=", "--adopt-devices="},
			"by-id=/dev/disk/by-id/ata-ST4000NM*,min-size=2Ti,rotational=true", "model=Samsung SSD 980*,rotational=false"},
		{"ssd-ssdcache-node-wd", "wd",
			[]string{"--device-class=sata", "--cache-devices=/dev/disk/by-id/nvme-eui.0025388b71b2c3d4",
				"--adopt-devices=/dev/disk/by-id/nvme-eui.0025388b71b2c3d4"},
			[]string{"--origin-devices=", "--cache-selector="},
			"model=WDC WD80*,max-size=9T", ""},
	} {
		t.Run(g.group, func(t *testing.T) {
			ds := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", g.name))
			spec := ds.Spec.Template.Spec
			want := map[string]string{"kubernetes.io/os": "linux", "ssdcache.io/node": "true", "ssdcache.io/group": g.group}
			if !maps.Equal(spec.NodeSelector, want) {
				t.Errorf("nodeSelector = %v, want %v", spec.NodeSelector, want)
			}
			if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != "node-role.kubernetes.io/control-plane" ||
				spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("tolerations = %+v, want the values' one", spec.Tolerations)
			}
			node := container(t, spec, "ssdcache-node")
			mustHaveArgs(t, node, g.args...)
			for _, prefix := range g.notArgs {
				if v, ok := argWithPrefix(node, prefix); ok {
					t.Errorf("unexpected %s%s", prefix, v)
				}
			}
			for flag, want := range map[string]string{"--origin-selector=": g.originSelector, "--cache-selector=": g.cacheSelector} {
				got, ok := argWithPrefix(node, flag)
				if want == "" {
					continue
				}
				if !ok || got != want {
					t.Errorf("%s%q, want %q", flag, got, want)
					continue
				}
				parsed, err := lvm.ParseSelector(got)
				if err != nil || parsed.String() != want {
					t.Errorf("ssdcache-node reads %s%s as %q (%v)", flag, got, parsed.String(), err)
				}
			}
		})
	}
}

// Values that render but could never run are refused at install time, with
// a message that says what to change.
func TestTemplatesRefuseImpossibleNodeValues(t *testing.T) {
	ch := loadChart(t)
	group := func(name, label string, extra map[string]any) map[string]any {
		g := map[string]any{"name": name, "nodeSelector": map[string]any{"ssdcache.io/group": label},
			"originDevices": []any{"/dev/disk/by-id/wwn-0x5000c500a1b2c3d4"}}
		maps.Copy(g, extra)
		return g
	}
	groups := func(g ...any) map[string]any { return map[string]any{"node": map[string]any{"nodeGroups": g}} }
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"one VG for both pools", map[string]any{"node": map[string]any{"cacheVG": "ssdcache-hdd"}}, `node.originVG and node.cacheVG are both "ssdcache-hdd"`},
		{"a group name twice", groups(group("a", "a", nil), group("a", "b", nil)), `the name "a" is used twice`},
		{"two groups on the same nodes", groups(group("a", "x", nil), group("b", "x", nil)), "node.nodeGroups a and b select the same nodes"},
		{"a group without origin devices", groups(group("a", "a", map[string]any{"originDevices": []any{}})), "node.nodeGroups a: no origin devices"},
		{"an adopt device no pool takes", map[string]any{"node": map[string]any{"originDevices": []any{"/dev/disk/by-id/wwn-1"},
			"adoptDevices": []any{"/dev/disk/by-id/wwn-2"}}}, "adoptDevices lists /dev/disk/by-id/wwn-2, which is in neither"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderValues(ch, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	// A group without devices of its own takes node's selector.
	v := groups(group("a", "a", map[string]any{"originDevices": []any{}}))
	v["node"].(map[string]any)["originSelector"] = map[string]any{"rotational": true}
	if _, err := renderValues(ch, v); err != nil {
		t.Fatalf("a group inheriting node.originSelector was refused: %v", err)
	}
}
