package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// runbooks are the operators' runbooks. Their blocks run in
// TestRunbooksRunAsWritten, in runbookSequence's order, against an API
// server with the chart installed; what needs a kubelet or the node's disks
// says so in a skip marker.
var runbooks = []string{"docs/runbooks/replace-failed-ssd.md", "docs/runbooks/remove-everything.md", "docs/runbooks/plan-capacity.md"}

// runbookSequence: plan (read the pools, limit a namespace, a priority
// class), then a failed SSD on storage-1, then the removal of everything.
var runbookSequence = []string{
	"capacity-pools", "capacity-namespace-limits", "capacity-priority-quota", "capacity-priority-class",
	"ssd-find", "ssd-cordon", "ssd-new-device", "ssd-restart-plugin", "ssd-retry", "ssd-uncordon",
	"cleanup-inventory", "cleanup-volumes", "cleanup-volumes-gone", "cleanup-bindings", "cleanup-helm",
	"cleanup-finalizers", "cleanup-crd", "cleanup-leases", "cleanup-annotations", "cleanup-check",
}

func runbookBlocks(t *testing.T) map[string]Block {
	t.Helper()
	blocks := map[string]Block{}
	for _, file := range runbooks {
		for _, b := range codeBlocks(t, file) {
			if slices.Contains(runbookSequence, b.Marker) {
				if prev, dup := blocks[b.Marker]; dup {
					t.Errorf("%s:%d and %s:%d are both marked %q", prev.File, prev.Line, b.File, b.Line, b.Marker)
				}
				blocks[b.Marker] = b
			}
		}
	}
	return blocks
}

// TestEveryRunbookBlockIsTested: a runbook's block runs in
// TestRunbooksRunAsWritten or says why it cannot.
func TestEveryRunbookBlockIsTested(t *testing.T) {
	for _, file := range runbooks {
		for _, b := range codeBlocks(t, file) {
			if b.Lang == "text" {
				continue
			}
			if !slices.Contains(runbookSequence, b.Marker) && !strings.HasPrefix(b.Marker, "skip (") {
				t.Errorf("%s:%d: a %q block marked %q, which is neither in the runbooks' sequence nor a skip (REASON):\n%s", b.File, b.Line, b.Lang, b.Marker, b.Text)
			}
		}
	}
	blocks := runbookBlocks(t)
	for _, name := range runbookSequence {
		if _, ok := blocks[name]; !ok {
			t.Errorf("no runbook block is marked %q", name)
		}
	}
}

// TestRunbooksRunAsWritten runs the runbooks' commands against a real
// kube-apiserver with the chart installed by helm: what a cluster shows,
// the retry of the Degraded bindings of one node, the new device in the
// values, and the removal of what helm uninstall leaves.
func TestRunbooksRunAsWritten(t *testing.T) {
	if testing.Short() || os.Getenv("KUBEBUILDER_ASSETS") == "" || os.Getenv("SSDCACHE_HELM") == "" {
		t.Skip("needs kube-apiserver, kubectl and helm: run hack/test-api.sh, which sets KUBEBUILDER_ASSETS and SSDCACHE_HELM")
	}
	sh := newShell(t)
	sh.run(t, "install", runbookInstall)
	blocks := runbookBlocks(t)
	for _, name := range runbookSequence {
		b, ok := blocks[name]
		if !ok {
			t.Fatalf("no runbook block is marked %q", name)
		}
		if setUp := runbookFixtures[name]; setUp != "" {
			sh.run(t, "fixture of "+name, setUp)
		}
		out := sh.run(t, fmt.Sprintf("%s:%d (%s)", b.File, b.Line, name), promptRE.ReplaceAllString(b.Text, ""))
		if check := runbookChecks[name]; check != nil {
			check(t, sh, out)
		}
	}
}

// runbookInstall is the README's install with a list of cache devices, the
// pools' annotations an agent writes, and bindings of two nodes, some
// Degraded as an agent leaves them after a drop (observedGeneration 1).
const runbookInstall = `kubectl create -f - <<'END'
apiVersion: v1
kind: Node
metadata: {name: storage-1}
---
apiVersion: v1
kind: Node
metadata: {name: storage-2}
END
mkdir -p _output/release
helm package ` + repo + `/charts/ssdcache --version 0.1.0 --app-version 0.1.0 -d _output/release >/dev/null
kubectl create namespace ssdcache-system
kubectl label namespace ssdcache-system pod-security.kubernetes.io/enforce=privileged
kubectl label node storage-1 storage-2 ssdcache.io/node=true
helm install ssdcache _output/release/ssdcache-0.1.0.tgz -n ssdcache-system \
  --set image.repository=registry.example.com/ssdcache \
  --set node.originSelector.byId='/dev/disk/by-id/ata-ST4000NM*' \
  --set-json 'node.cacheDevices=["/dev/disk/by-id/nvme-Samsung_SSD_980_PRO_1TB_S5GXNF0R111111"]' \
  --set storageClass.create=true >/dev/null
for n in storage-1 storage-2; do
  kubectl annotate node $n ssdcache.io/cache-pool-bytes=1000203091968 ssdcache.io/cache-extent-bytes=4194304 \
    ssdcache.io/cache-block-bytes=262144 ssdcache.io/cache-capacity-bytes=980199029248 \
    ssdcache.io/cache-free-bytes=892431155200 ssdcache.io/device-class= ssdcache.io/cache-device-class= >/dev/null
done
kubectl create namespace team-a
kubectl create namespace app
for b in web-1:storage-1:Degraded db-1:storage-1:Degraded logs-1:storage-1:Attached web-2:storage-2:Degraded; do
  IFS=: read -r name node phase <<<"$b"
  mode=ReadCache; [ "$name" = db-1 ] && mode=Paused
  kubectl apply -f - >/dev/null <<END
apiVersion: ssdcache.io/v1alpha1
kind: CacheBinding
metadata: {name: $name, namespace: app, labels: {ssdcache.io/node: $node}, finalizers: [ssdcache.io/cache-detach]}
spec: {pvcName: $name, size: 10%, mode: $mode}
END
  degraded=False; reason=CacheDeviceHealthy
  if [ "$phase" = Degraded ]; then degraded=True; reason=CacheDeviceFailed; fi
  kubectl -n app patch cachebinding $name --subresource=status --type=merge -p "{\"status\": {\"phase\": \"$phase\", \"nodeName\": \"$node\",
    \"conditions\": [{\"type\": \"Degraded\", \"status\": \"$degraded\", \"reason\": \"$reason\", \"message\": \"m\", \"observedGeneration\": 1,
      \"lastTransitionTime\": \"2026-01-01T00:00:00Z\"}]}}" >/dev/null
done
`

// runbookFixtures make what a block expects that no kubelet, agent or
// external-provisioner makes here.
var runbookFixtures = map[string]string{
	// A volume's PV and claim, the agents' and the controller's Leases.
	"cleanup-inventory": `kubectl apply -f - >/dev/null <<'END'
apiVersion: v1
kind: PersistentVolume
metadata: {name: pvc-0001}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: ssdcache-cached
  claimRef: {namespace: app, name: data}
  csi: {driver: ssdcache.io, volumeHandle: pvc-0001}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: app}
spec:
  storageClassName: ssdcache-cached
  volumeName: pvc-0001
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: ssdcache-node.storage-1, namespace: ssdcache-system}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: ssdcache-node.storage-2, namespace: ssdcache-system}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: ssdcache-controller.ssdcache.io, namespace: ssdcache-system}
END
# No kube-controller-manager runs here: do what its pvc-protection
# controller does for a claim no pod uses.
kubectl -n app patch pvc data --type=json -p '[{"op": "remove", "path": "/metadata/finalizers"}]' >/dev/null
`,
	// external-provisioner deletes a deleted claim's PV (and its LV), and
	// kube-controller-manager its pv-protection finalizer; neither runs here.
	"cleanup-volumes-gone": `kubectl patch pv pvc-0001 --type=json -p '[{"op": "remove", "path": "/metadata/finalizers"}]' >/dev/null
kubectl delete pv pvc-0001 >/dev/null
`,
}

var runbookChecks = map[string]func(t *testing.T, sh *shell, out string){
	"capacity-pools": func(t *testing.T, _ *shell, out string) {
		if !strings.Contains(out, "storage-1") || !strings.Contains(out, "1000203091968") || !strings.Contains(out, "4194304") {
			t.Errorf("the pools' columns:\n%s\nwant each node's pool and extent", out)
		}
	},
	"capacity-namespace-limits": func(t *testing.T, sh *shell, _ string) {
		got := sh.run(t, "limits", `kubectl get namespace team-a -o jsonpath='{.metadata.annotations.ssdcache\.io/cache-bytes-limit} {.metadata.annotations.ssdcache\.io/cache-bindings-limit}'`)
		if got != "200Gi 20" {
			t.Errorf("team-a's limits: %q, want 200Gi 20", got)
		}
	},
	"capacity-priority-class": func(t *testing.T, sh *shell, _ string) {
		got := sh.run(t, "priority class", "kubectl -n ssdcache-system get daemonset ssdcache-node -o jsonpath='{.spec.template.spec.priorityClassName}'")
		if got != "ssdcache-node-critical" {
			t.Errorf("the DaemonSet's priority class is %q, want ssdcache-node-critical", got)
		}
	},
	"ssd-find": func(t *testing.T, _ *shell, out string) {
		if !strings.Contains(out, "web-1") || !strings.Contains(out, "Degraded") || strings.Contains(out, "web-2") {
			t.Errorf("the bindings of storage-1:\n%s\nwant web-1 Degraded and not storage-2's web-2", out)
		}
	},
	"ssd-cordon": func(t *testing.T, sh *shell, _ string) {
		if got := sh.run(t, "cordoned", "kubectl get node storage-1 -o jsonpath='{.spec.unschedulable}'"); got != "true" {
			t.Errorf("storage-1 unschedulable: %q", got)
		}
	},
	"ssd-new-device": func(t *testing.T, sh *shell, _ string) {
		args := sh.run(t, "args", "kubectl -n ssdcache-system get daemonset ssdcache-node -o jsonpath='{.spec.template.spec.containers[0].args}'")
		if !strings.Contains(args, "S5GXNF0R222222") || strings.Contains(args, "S5GXNF0R111111") {
			t.Errorf("the plugin's args after the new device: %s", args)
		}
	},
	"ssd-retry": func(t *testing.T, sh *shell, _ string) {
		got := sh.run(t, "bindings", `kubectl get cachebindings -n app -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.generation}/{.spec.mode} {end}'`)
		// The agent retries a Degraded binding whose generation passed its
		// condition's observedGeneration (1); each mode comes back as it was.
		for _, want := range []string{"web-1=3/ReadCache", "db-1=3/Paused", "logs-1=1/ReadCache", "web-2=1/ReadCache"} {
			if !strings.Contains(got, want) {
				t.Errorf("bindings after the retry: %s; want %s (the Degraded ones of storage-1 changed twice, the others untouched)", got, want)
			}
		}
	},
	"ssd-uncordon": func(t *testing.T, sh *shell, _ string) {
		if got := sh.run(t, "uncordoned", "kubectl get node storage-1 -o jsonpath='{.spec.unschedulable}'"); got != "" {
			t.Errorf("storage-1 unschedulable: %q", got)
		}
	},
	"cleanup-inventory": func(t *testing.T, _ *shell, out string) {
		for _, want := range []string{"pvc-0001", "app/data", "ssdcache-node.storage-1", "web-1"} {
			if !strings.Contains(out, want) {
				t.Errorf("the inventory:\n%s\nlacks %s", out, want)
			}
		}
	},
	"cleanup-helm": func(t *testing.T, sh *shell, _ string) {
		// Helm leaves the CRD of crds/ and the bindings that still have their finalizer.
		left := sh.run(t, "after uninstall", "kubectl get crd cachebindings.ssdcache.io -o name; kubectl get cachebindings -A -o name | wc -l; kubectl get csidriver,storageclass -o name")
		if strings.TrimSpace(left) != "customresourcedefinition.apiextensions.k8s.io/cachebindings.ssdcache.io\n4" {
			t.Errorf("after helm uninstall: %q, want the CRD and the 4 bindings held by their finalizer, and no CSIDriver or StorageClass", left)
		}
	},
	"cleanup-check": func(t *testing.T, _ *shell, out string) {
		if strings.TrimSpace(out) != "" {
			t.Errorf("left after the runbook: %q", out)
		}
	},
}

// capacityRow is a line of the capacity runbook's table: count volumes of
// volume bytes, each with a cache of size, on a pool of extent-sized
// extents whose node makes blocks of at least block bytes.
type capacityRow struct {
	count                       int
	volume, size, extent, block string
}

var capacityRows = []capacityRow{
	{10, "100Gi", "10%", "4Mi", "256Ki"},
	{10, "1Ti", "5%", "4Mi", "256Ki"},
	{50, "20Gi", "10%", "4Mi", "256Ki"},
	{4, "4Ti", "10%", "4Mi", "256Ki"},
	{100, "10Gi", "256Mi", "4Mi", "256Ki"},
	{200, "1Gi", "16Mi", "4Mi", "256Ki"},
	{200, "1Gi", "16Mi", "1Mi", "256Ki"},
	{10, "100Gi", "10%", "4Mi", "64Ki"},
}

const mib = 1 << 20

// line is the row as the runbook's table writes it, computed as admission
// does: the cache's size resolved against the volume's, charged
// cachesize.Footprint.
func (r capacityRow) line() (string, error) {
	vol, extentQ, blockQ := resource.MustParse(r.volume), resource.MustParse(r.extent), resource.MustParse(r.block)
	size, err := ssdv1.ParseCacheSize(r.size)
	if err != nil {
		return "", err
	}
	data, err := size.Resolve(vol.Value())
	if err != nil {
		return "", err
	}
	extent, minSectors := uint64(extentQ.Value()), uint64(blockQ.Value())/cachesize.SectorSize
	blockSectors := cachesize.BlockSectorsFor(uint64(data), minSectors)
	meta := cachesize.MetadataBytesFor(uint64(data), blockSectors)
	each := cachesize.Footprint(uint64(data), extent, minSectors)
	total := each * uint64(r.count)
	return fmt.Sprintf("| %d × %s | %s | %s extents, %s blocks | %d KiB | %.1f MiB | %d MiB | %.1f GiB | %.1f GiB |",
		r.count, r.volume, r.size, r.extent, r.block, blockSectors*cachesize.SectorSize>>10,
		float64(meta)/mib, each/mib, float64(uint64(data)*uint64(r.count))/(1<<30), float64(total)/(1<<30)), nil
}

var tableRowRE = regexp.MustCompile(`(?m)^\| \d+ × .*\|$`)

// TestCapacityTableIsComputed: the capacity runbook's table is what
// pkg/cachesize, the admission's arithmetic, computes for its rows.
func TestCapacityTableIsComputed(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "docs/runbooks/plan-capacity.md"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range capacityRows {
		l, err := r.line()
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l)
	}
	got := tableRowRE.FindAllString(string(data), -1)
	if !slices.Equal(got, want) {
		t.Errorf("docs/runbooks/plan-capacity.md's table:\n%s\nwant (pkg/cachesize):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
