package chart

import (
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ssdcache/ssdcache/test/docs"
)

const repoRoot = "../.."

// readmeInstallValues are the values the README's install block gives
// (`--set key=value`), read as helm reads them: the selector-only install.
func readmeInstallValues(t *testing.T) map[string]any {
	t.Helper()
	b, err := docs.Marked(repoRoot, "README.md", "install")
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	for _, m := range regexp.MustCompile(`--set (\S+)`).FindAllStringSubmatch(b.Text, -1) {
		if err := strvals.ParseInto(strings.ReplaceAll(m[1], "'", ""), values); err != nil {
			t.Fatalf("README.md's install: --set %s: %v", m[1], err)
		}
	}
	node, _ := values["node"].(map[string]any)
	if node["originSelector"] == nil || node["originDevices"] != nil {
		t.Fatalf("README.md's install no longer picks its disks by selector only (%v): update this test", node)
	}
	return values
}

// chartReadmeGroups are the values of the chart README's node-groups block:
// two groups that may share a node (a label against a hostname).
func chartReadmeGroups(t *testing.T) map[string]any {
	t.Helper()
	b, err := docs.Marked(repoRoot, "charts/ssdcache/README.md", "node-groups")
	if err != nil {
		t.Fatal(err)
	}
	v, err := chartutil.ReadValues([]byte(b.Text))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// An install that can never run is refused by `helm install` and `helm
// template`, with the value, what was given and what is allowed, rather than
// rendering a DaemonSet whose plugin exits on every node (#38 item 5).
func TestInstallWithoutOriginDisksIsRefused(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		name   string
		values map[string]any
	}{
		{"the chart's defaults", map[string]any{}},
		{"a class and the bench, no disks", map[string]any{"storageClass": map[string]any{"create": true}, "bench": map[string]any{"enabled": true}}},
		{"cache disks only", map[string]any{"node": map[string]any{"cacheSelector": map[string]any{"byId": "/dev/disk/by-id/nvme-Samsung*"},
			"cacheDevices": []any{"/dev/disk/by-id/nvme-eui.1"}}}},
		{"empty lists", map[string]any{"node": map[string]any{"originDevices": []any{}, "originSelector": map[string]any{}, "nodeGroups": []any{}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderExactly(ch, c.values)
			if err == nil {
				t.Fatal("rendered")
			}
			for _, want := range []string{
				"node.originDevices is [] and node.originSelector is {}, and node.nodeGroups is empty",
				"would exit on every node",
				"node.originSelector (keys byId, model, minSize, maxSize, rotational;",
				"node.originDevices (a list of /dev/disk/by-id/<id> paths)",
				"or node.nodeGroups",
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
		})
	}
}

// Pools that would take the same disk never come up on any node: refused.
func TestPoolsSharingADiskAreRefused(t *testing.T) {
	ch := loadChart(t)
	const hdd = "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4"
	group := func(g map[string]any) map[string]any {
		g["name"], g["nodeSelector"] = "a", map[string]any{"ssdcache.io/group": "a"}
		return map[string]any{"node": map[string]any{"nodeGroups": []any{g}}}
	}
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"a disk in both lists", map[string]any{"node": map[string]any{"originDevices": []any{hdd}, "cacheDevices": []any{hdd}}},
			"node: " + hdd + " is in both originDevices and cacheDevices; a disk may be in one pool only"},
		{"a group's disk in both lists", group(map[string]any{"originDevices": []any{hdd}, "cacheDevices": []any{hdd}}),
			"node.nodeGroups a: " + hdd + " is in both originDevices and cacheDevices"},
		{"one selector for both", map[string]any{"node": map[string]any{"originSelector": map[string]any{"rotational": true},
			"cacheSelector": map[string]any{"rotational": true}}},
			"node: originSelector and cacheSelector are the same (rotational=true)"},
		{"a group's selector and node's", map[string]any{"node": map[string]any{"cacheSelector": map[string]any{"model": "ST4000*"},
			"nodeGroups": []any{map[string]any{"name": "a", "nodeSelector": map[string]any{"g": "a"}, "originSelector": map[string]any{"model": "ST4000*"}}}}},
			"node.nodeGroups a: originSelector and cacheSelector are the same (model=ST4000*)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderExactly(ch, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
}

// NOTES.txt says what each way of installing really does: where each
// DaemonSet runs, which disks each pool takes, which nodes are cacheless,
// and nothing about missing devices that are in fact selected (#38 item 5:
// after the README's own install it said the plugin exits).
func TestNotesSayWhatEachInstallDoes(t *testing.T) {
	ch := loadChart(t)
	const (
		hdd1, hdd2, ssd = "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4", "/dev/disk/by-id/wwn-0x5000c500a1b2c3d5", "/dev/disk/by-id/nvme-eui.0025388b71b2c3d4"
		everyLabelled   = "kubectl get nodes -l 'kubernetes.io/os=linux,ssdcache.io/node=true'"
		cacheless       = "no cache pool: these nodes are cacheless"
		noCacheAnywhere = "No node has a cache pool"
		serials         = "/dev/disk/by-id paths usually carry serial numbers"
	)
	valuesOf := func(t *testing.T, file string) map[string]any { return readValues(t, file) }
	for _, c := range []struct {
		name          string
		values        func(t *testing.T) map[string]any
		want, notWant []string
	}{
		{"the README's install: selectors only", readmeInstallValues,
			[]string{
				"DaemonSet ssd-ssdcache-node runs the node plugin on these nodes:\n  " + everyLabelled,
				"kubectl label node <node> ssdcache.io/node=true",
				`origin pool ssdcache-hdd (the volumes): the whole disks that selector "by-id=/dev/disk/by-id/ata-ST4000NM*" picks on each node`,
				`cache pool ssdcache-nvme (device class nvme): the whole disks that selector "by-id=/dev/disk/by-id/nvme-Samsung_SSD_980*" picks on each node`,
				"kubectl -n ssdcache-system rollout status daemonset/ssd-ssdcache-node\n",
				"kubectl get events -A --field-selector reason=PoolNotReady",
				"Volumes of StorageClass ssd-ssdcache-cached get a read cache",
			},
			[]string{"WARNING", "exits", "is empty", serials, cacheless, noCacheAnywhere, "except"}},
		{"device lists", func(*testing.T) map[string]any {
			return map[string]any{"node": map[string]any{"originDevices": []any{hdd1, hdd2}, "cacheDevices": []any{ssd}}}
		},
			[]string{
				"origin pool ssdcache-hdd (the volumes): " + hdd1 + ", " + hdd2 + "\n",
				"cache pool ssdcache-nvme (device class nvme): " + ssd + "\n",
				serials + ": every one of these nodes\n  needs those very disks",
			},
			[]string{"WARNING", `selector "`, cacheless}},
		{"devices and selectors", func(t *testing.T) map[string]any { return valuesOf(t, "testdata/full.yaml") },
			[]string{
				"origin pool ssdcache-hdd (the volumes): " + hdd1 + ", " + hdd2 + `, and the whole disks that selector "model=ST4000NM*,rotational=true" picks on each node`,
				"cache pool ssdcache-nvme (device class fast): " + ssd + `, and the whole disks that selector "by-id=/dev/disk/by-id/nvme-Samsung*,max-size=4Ti" picks on each node`,
				"logs -f -l app.kubernetes.io/instance=ssd,app.kubernetes.io/component=bench",
				"for at most\n30 minutes", "get configmap ssd-ssdcache-bench-report",
			},
			[]string{"WARNING", cacheless}},
		{"cacheless nodes, a caching class", func(*testing.T) map[string]any {
			return map[string]any{"node": map[string]any{"originSelector": map[string]any{"rotational": true}}, "storageClass": map[string]any{"create": true}}
		},
			[]string{`the whole disks that selector "rotational=true" picks`, cacheless + ", their volumes live on the HDDs",
				noCacheAnywhere + " (no cacheDevices or cacheSelector is set), so its\nvolumes work uncached"},
			[]string{"cache pool ssdcache-nvme"}},
		{"cacheless nodes, an uncached class", func(*testing.T) map[string]any {
			return map[string]any{"node": map[string]any{"originDevices": []any{hdd1}}, "storageClass": map[string]any{"create": true, "cacheMode": "none"}}
		},
			[]string{cacheless}, []string{noCacheAnywhere}},
		{"node groups, one cacheless", func(t *testing.T) map[string]any { return valuesOf(t, "testdata/groups.yaml") },
			[]string{
				"DaemonSet ssd-ssdcache-node-rack-a (node group rack-a) runs the node plugin on these nodes:\n" +
					"  kubectl get nodes -l 'kubernetes.io/os=linux,ssdcache.io/group=rack-a,ssdcache.io/node=true'\n" +
					"  label a node with the disks: kubectl label node <node> ssdcache.io/group=rack-a ssdcache.io/node=true\n" +
					"  origin pool ssdcache-hdd (the volumes): /dev/disk/by-id/wwn-0x5000c500aaaa0001\n" +
					"  cache pool ssdcache-nvme (device class nvme): /dev/disk/by-id/nvme-shared-model-serial\n",
				"DaemonSet ssd-ssdcache-node-rack-b (node group rack-b) runs the node plugin on these nodes:\n" +
					"  kubectl get nodes -l 'kubernetes.io/os=linux,ssdcache.io/group=rack-b,ssdcache.io/node=true'\n" +
					"  label a node with the disks: kubectl label node <node> ssdcache.io/group=rack-b ssdcache.io/node=true\n" +
					"  origin pool ssdcache-hdd (the volumes): /dev/disk/by-id/wwn-0x5000c500bbbb0001\n" +
					"  " + cacheless,
				"rollout status daemonset/ssd-ssdcache-node-rack-a\n", "rollout status daemonset/ssd-ssdcache-node-rack-b\n",
			},
			[]string{"daemonset/ssd-ssdcache-node\n", everyLabelled, noCacheAnywhere, "except", "run neither"}},
		{"node groups that may share a node", chartReadmeGroups,
			[]string{
				"DaemonSet ssd-ssdcache-node-seagate (node group seagate) runs the node plugin on these nodes, except any of group storage-2:",
				"DaemonSet ssd-ssdcache-node-storage-2 (node group storage-2) runs the node plugin on these nodes, except any of group seagate:",
				"kubectl label node storage-2 ssdcache.io/node=true",
				"a node labelled for two\ngroups runs neither plugin",
				"kubectl get nodes -l 'kubernetes.io/hostname=storage-2,kubernetes.io/os=linux,ssdcache.io/group=seagate,ssdcache.io/node=true'   # groups seagate and storage-2",
			},
			nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := renderExactly(ch, c.values(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(r.notes, w) {
					t.Errorf("NOTES lack %q", w)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(r.notes, w) {
					t.Errorf("NOTES say %q", w)
				}
			}
			if t.Failed() {
				t.Logf("NOTES:\n%s", r.notes)
			}
		})
	}
}

// The commands NOTES.txt gives are ones kubectl takes and that name what
// the release made: each DaemonSet's nodes by its own node selector, a
// rollout status for each DaemonSet and for no other, selectors that parse.
func TestNotesCommandsWork(t *testing.T) {
	ch := loadChart(t)
	configs := map[string]map[string]any{"README install": readmeInstallValues(t), "chart README groups": chartReadmeGroups(t)}
	for _, f := range valuesFiles {
		configs[valuesName(f)] = readValues(t, f)
	}
	for name, values := range configs {
		t.Run(name, func(t *testing.T) {
			r, err := renderValues(ch, values)
			if err != nil {
				t.Fatal(err)
			}
			sets := r.ofKind("DaemonSet")
			rollouts := regexp.MustCompile(`(?m)^  kubectl -n `+releaseNS+` rollout status daemonset/(\S+)$`).FindAllStringSubmatch(r.notes, -1)
			if len(rollouts) != len(sets) {
				t.Errorf("%d rollout commands for %d DaemonSets", len(rollouts), len(sets))
			}
			for _, m := range rollouts {
				r.one(t, "DaemonSet", m[1])
			}
			for _, o := range sets {
				ds := typed[appsv1.DaemonSet](t, o)
				want := "kubectl get nodes -l '" + labels.SelectorFromSet(ds.Spec.Template.Spec.NodeSelector).String() + "'\n"
				if !strings.Contains(r.notes, want) {
					t.Errorf("NOTES lack %q for DaemonSet %s", want, ds.Name)
				}
			}
			for _, m := range regexp.MustCompile(`kubectl get nodes -l '([^']*)'`).FindAllStringSubmatch(r.notes, -1) {
				if _, err := labels.Parse(m[1]); err != nil {
					t.Errorf("kubectl get nodes -l %q: %v", m[1], err)
				}
			}
			for _, m := range regexp.MustCompile(`kubectl label node \S+ (.*)`).FindAllStringSubmatch(r.notes, -1) {
				for _, kv := range strings.Fields(m[1]) {
					if _, err := labels.ConvertSelectorToLabelsMap(kv); err != nil || !strings.Contains(kv, "=") {
						t.Errorf("kubectl label node: %q is no label: %v", kv, err)
					}
				}
			}
			for _, m := range regexp.MustCompile(`--field-selector (\S+)`).FindAllStringSubmatch(r.notes, -1) {
				if _, err := fields.ParseSelector(m[1]); err != nil {
					t.Errorf("--field-selector %q: %v", m[1], err)
				}
			}
		})
	}
}
