package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
)

// TestAgentUnderItsRBAC runs the node agent (over fake storage) as a user
// with exactly the permissions the chart gives the node plugin: the
// ClusterRole generated from pkg/agent's markers, with Leases only in a Role
// of the agent's namespace (test/chart checks the chart has that split). The
// agent must renew its Lease, report the Node's capacity and write a
// binding's status, and grow a claim's volume, without the API server
// refusing anything; a read the RBAC does not cover (a cached read of Leases
// or PVs, say) stops it. The role has no list or watch on PVs, so the agent
// holds no PV informer; its cache holds claims as stubs only.
func TestAgentUnderItsRBAC(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "")
	user := grantNodeRole(t, ctx, c, ns)
	cfg := user.Config()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: c.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// As ssdcache-node: the agent sees only the bindings labelled with its node.
		Cache: agent.CacheOptions(node)})
	if err != nil {
		t.Fatal(err)
	}
	l := lvmfake.New()
	l.AddVG("hdd", 100<<30, lvm.PoolTagPrefix+"origin")
	l.AddVG("nvme", 10<<30, lvm.PoolTagPrefix+"cache")
	m, err := agent.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pools := agent.NewPoolWatch(l, "hdd", []string{"nvme"}, m, agent.PoolWatchOptions{})
	engine := cache.NewEngine(cache.Layers{DM: dmfake.New(), LVM: l, Dev: blockdevfake.New()},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil)
	if err := mgr.Add(pools); err != nil {
		t.Fatal(err)
	}
	err = agent.Setup(mgr, agent.Config{NodeName: node, Engine: engine, Dev: blockdevfake.New(), Locks: cache.NewVolumeLocks(),
		Metrics: m, Pools: pools, DeviceClass: "nvme", LeaseNamespace: ns, Expander: growAsAsked{}, DriverName: ssdv1.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	mgrCtx, stop := context.WithCancel(ctx)
	go func() { stopped <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() { stop(); <-stopped })

	createVolume(t, ctx, c, ns, volume{pvc: "data", node: node})
	createBinding(t, ctx, c, ns, "cache", "data", "1Gi")
	eventually(t, "the agent's Lease, the Node's capacity and the binding's status", func(ctx context.Context) error {
		select {
		case err := <-stopped:
			t.Fatalf("the agent's manager stopped: %v", err)
		default:
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssdv1.AgentLeaseName(node)}, &coordinationv1.Lease{}); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		n := &corev1.Node{}
		// The pool as admission charges it: 10 GiB of the fake's 4 MiB extents,
		// caches of the engine's default 256 KiB blocks.
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil || n.Annotations[ssdv1.AnnotationDeviceClass] != "nvme" || n.Annotations[ssdv1.AnnotationDeviceClassDeprecated] != "nvme" ||
			n.Annotations[ssdv1.AnnotationCachePoolBytes] != "10737418240" || n.Annotations[ssdv1.AnnotationCacheExtentBytes] != "4194304" ||
			n.Annotations[ssdv1.AnnotationCacheBlockBytes] != "262144" {
			return fmt.Errorf("node annotations %v, %v", n.Annotations, err)
		}
		b, err := getBinding(ctx, c, ns, "cache")
		if err != nil {
			return err
		}
		if r := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionReady); r == nil || r.Reason != ssdv1.ReasonVolumeNotStaged {
			return fmt.Errorf("ready condition %+v, want the agent's VolumeNotStaged", r)
		}
		return nil
	})

	// The API server lets only claims of a class that allows expansion grow.
	sc := create(t, ctx, c, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("sc")}, Provisioner: ssdv1.DriverName,
		AllowVolumeExpansion: ptr.To(true)}).Name
	grown := createVolume(t, ctx, c, ns, volume{pvc: "grown", node: node, size: "1Gi", storageClass: sc})
	// A patch: the controller labels the claim with its node meanwhile.
	before := grown.DeepCopy()
	grown.Status.Capacity = grown.Spec.Resources.Requests
	if err := c.Status().Patch(ctx, grown, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	setRequest(t, ctx, c, grown, "2Gi")
	waitGrown(t, c, grown, "2Gi", "the resizer's PV and claim writes for 2Gi")
	cached := &corev1.PersistentVolumeClaim{}
	if err := mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(grown), cached); err != nil {
		t.Fatal(err)
	}
	if cached.Status.Phase != "" || cached.Spec.AccessModes != nil {
		t.Errorf("the agent's cache holds claim %s whole (phase %q, access modes %v): want a stub",
			grown.Name, cached.Status.Phase, cached.Spec.AccessModes)
	}
}

// growAsAsked is a VolumeExpander whose volumes always grow to the size asked.
type growAsAsked struct{}

func (growAsAsked) ControllerExpandVolume(_ context.Context, req *csispec.ControllerExpandVolumeRequest) (*csispec.ControllerExpandVolumeResponse, error) {
	return &csispec.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes(), NodeExpansionRequired: true}, nil
}

// grantNodeRole creates a user with the node plugin's permissions: the
// generated ClusterRole without Leases, and Leases in a Role of namespace ns.
func grantNodeRole(t *testing.T, ctx context.Context, c client.Client, ns string) *envtest.AuthenticatedUser {
	t.Helper()
	path := filepath.Join("..", "..", "deploy", "rbac", "node", "role.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	generated := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, generated); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	name := uniqueName("ssdcache-node")
	cluster := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}}
	local := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for _, r := range generated.Rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == coordinationv1.GroupName {
			local.Rules = append(local.Rules, r)
		} else {
			cluster.Rules = append(cluster.Rules, r)
		}
	}
	return newUser(t, ctx, c, name, cluster, local, clusterRoleBinding(name),
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Subjects: userSubject(name),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})
}
