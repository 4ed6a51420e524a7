package api

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ssdcache/ssdcache/pkg/agent"
	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/csi"
	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
	"github.com/ssdcache/ssdcache/pkg/mounter/mounterfake"
)

// TestNodePluginUnderNodeScope runs what the node DaemonSet's pod runs, as
// node A's plugin under the chart's node RBAC and node-scope policy (issue
// 37 point 4): the node agent in-process with the CSI driver over fake
// storage, and the real csi-provisioner sidecar with the chart's flags
// against that driver's socket. Every call they make must still pass:
// provisioning a PV for a claim selected to A, publishing A's capacity,
// the agent's Lease, Node capacity and binding status, growing the volume
// (PV and claim status) and deleting the released PV.
//
// csi-provisioner is the one make test-e2e builds (hack/e2e-assets.sh), or
// $SSDCACHE_CSI_PROVISIONER; without it only the agent's part runs, and
// TestNodeScope* stand in for the sidecar's calls.
func TestNodePluginUnderNodeScope(t *testing.T) {
	ctx, c := needAPIServer(t)
	s := installNodeScope(t, ctx, c)
	node := createNode(t, ctx, c, "")
	ns := newNamespace(t, ctx, c)

	l := lvmfake.New()
	l.AddVG("hdd", 100<<30, lvm.PoolTagPrefix+"origin")
	l.AddVG("nvme", 10<<30, lvm.PoolTagPrefix+"cache")
	engine := cache.NewEngine(cache.Layers{DM: dmfake.New(), LVM: l, Dev: blockdevfake.New()},
		cache.Pools{OriginVG: "hdd", CacheVGs: map[string]string{"nvme": "nvme"}, DefaultClass: "nvme"}, nil)
	locks := cache.NewVolumeLocks()
	socket := filepath.Join(t.TempDir(), "csi.sock")
	driver, err := csi.NewDriver(csi.Config{DriverName: ssdv1.DriverName, Version: "test", NodeID: node, Endpoint: "unix://" + socket},
		csi.Deps{Engine: engine, LVM: l, Mounter: mounterfake.New(), Locks: locks})
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, ctx, s, node, driver, engine, locks, l)

	sc := create(t, ctx, c, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("sc")}, Provisioner: ssdv1.DriverName,
		Parameters:           map[string]string{"ssdcache.io/cache-mode": "None", "csi.storage.k8s.io/fstype": "ext4"},
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowVolumeExpansion: ptr.To(true)}).Name
	var pvc *corev1.PersistentVolumeClaim
	provisioner := provisionerBinary()
	if provisioner == "" {
		t.Log("no csi-provisioner binary (make test-e2e builds it; or set SSDCACHE_CSI_PROVISIONER): the sidecar's part is skipped")
		pvc = createVolume(t, ctx, c, ns, volume{pvc: "data", node: node, size: "1Gi", storageClass: sc})
		t.Cleanup(func() { deletePVs(t, c, "pv-"+ns) })
	} else {
		logs := runProvisioner(t, ctx, c, s, provisioner, node, socket)
		pvc = provisionedVolume(t, ctx, c, ns, sc, node)
		eventually(t, node+"'s CSIStorageCapacity for "+sc, func(ctx context.Context) error {
			return findCapacity(ctx, c, s.namespace, sc, node)
		})
		defer func() { checkProvisionerLogs(t, logs) }()
	}

	createBinding(t, ctx, c, ns, "cache", pvc.Name, "1Gi")
	eventually(t, "the agent's Lease, the Node's capacity and the binding's status", func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: ssdv1.AgentLeaseName(node)}, &coordinationv1.Lease{}); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil || n.Annotations[ssdv1.AnnotationCachePoolBytes] == "" {
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

	// The resizer grows the volume, records the size on the PV and hands the
	// filesystem to kubelet in the claim's status.
	setRequest(t, ctx, c, pvc, "2Gi")
	waitGrown(t, c, pvc, "2Gi", "the volume grown to 2Gi")

	if provisioner == "" {
		return
	}
	// Released as the PV controller would once the claim is gone:
	// csi-provisioner deletes the volume, the PV and then its finalizer
	// (kube-controller-manager's pv-protection, which does not run here,
	// would remove the last one).
	pv := &corev1.PersistentVolume{}
	if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
		t.Fatal(err)
	}
	pv.Status.Phase = corev1.VolumeReleased
	if err := c.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	eventually(t, "csi-provisioner's deletion of "+pv.Name, func(ctx context.Context) error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pv), pv); err != nil {
			return client.IgnoreNotFound(err)
		}
		if pv.DeletionTimestamp == nil || slices.Contains(pv.Finalizers, "external-provisioner.volume.kubernetes.io/finalizer") {
			return fmt.Errorf("deletion %v, finalizers %v", pv.DeletionTimestamp, pv.Finalizers)
		}
		return nil
	})
}

// startAgent runs the node agent as node's plugin, with the driver's CSI
// server and its controller service as the resizer's expander, as
// ssdcache-node does.
func startAgent(t *testing.T, ctx context.Context, s *nodeScope, node string, driver *csi.Driver, engine *cache.Engine, locks *cache.VolumeLocks, l lvm.Interface) {
	t.Helper()
	// Another test of the process runs an agent too: its controllers' names repeat.
	mgr, err := ctrl.NewManager(s.config(node), ctrl.Options{Scheme: shared.client.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// As ssdcache-node: the agent sees only the bindings labelled with its node.
		Cache: agent.CacheOptions(node)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := agent.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pools := agent.NewPoolWatch(l, "hdd", []string{"nvme"}, m, agent.PoolWatchOptions{})
	for _, r := range []interface{ Start(context.Context) error }{pools, driver} {
		if err := mgr.Add(runnableFunc(r.Start)); err != nil {
			t.Fatal(err)
		}
	}
	err = agent.Setup(mgr, agent.Config{NodeName: node, Engine: engine, Dev: blockdevfake.New(), Locks: locks,
		Metrics: m, Pools: pools, DeviceClass: "nvme", LeaseNamespace: s.namespace, Expander: driver.Controller, DriverName: ssdv1.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	mgrCtx, stop := context.WithCancel(ctx)
	go func() { stopped <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("the agent's manager: %v", err)
		}
	})
}

type runnableFunc func(context.Context) error

func (f runnableFunc) Start(ctx context.Context) error { return f(ctx) }

func provisionerBinary() string {
	if p := os.Getenv("SSDCACHE_CSI_PROVISIONER"); p != "" {
		return p
	}
	dir := os.Getenv("CACHE_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".cache", "ssdcache")
	}
	p := filepath.Join(dir, "e2e", "bin", "csi-provisioner")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// runProvisioner starts csi-provisioner with the chart's flags, as node's
// plugin (a kubeconfig that impersonates the ServiceAccount with the node
// claim), in a pod of the DaemonSet (it reads its pod to find the owner of
// its capacity objects).
func runProvisioner(t *testing.T, ctx context.Context, c client.Client, s *nodeScope, bin, node, socket string) *syncBuffer {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(s.daemonSet.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, ct := range containers {
		ct := ct.(map[string]any)
		if ct["name"] != "csi-provisioner" {
			continue
		}
		for _, a := range ct["args"].([]any) {
			arg := a.(string)
			switch {
			case strings.HasPrefix(arg, "--csi-address="):
				arg = "--csi-address=" + socket
			case strings.HasPrefix(arg, "--http-endpoint="):
				continue // no port of its own in a test
			}
			args = append(args, arg)
		}
	}
	if len(args) == 0 {
		t.Fatal("the chart's DaemonSet has no csi-provisioner container with args")
	}
	pod := create(t, ctx, c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("node-plugin"), Namespace: s.namespace, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: s.daemonSet.GetName(), UID: types.UID("ds-" + node), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "csi-provisioner", Image: "csi-provisioner"}}},
	})
	kubeconfig := impersonatingKubeconfig(t, s, node)
	logs := &syncBuffer{}
	cmd := exec.Command(bin, append(args, "--kubeconfig="+kubeconfig)...)
	cmd.Env = append(os.Environ(), "NODE_NAME="+node, "NAMESPACE="+s.namespace, "POD_NAME="+pod.Name)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
			t.Errorf("csi-provisioner exited during the test:\n%s", logs.String())
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			t.Logf("csi-provisioner output:\n%s", logs.String())
		}
	})
	return logs
}

// impersonatingKubeconfig is the test's admin credentials acting as node's
// plugin, as its bound token would authenticate it.
func impersonatingKubeconfig(t *testing.T, s *nodeScope, node string) string {
	t.Helper()
	cfg := s.config(node)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups, ImpersonateUserExtra: cfg.Impersonate.Extra}
	kc.Contexts["node"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "node"}
	kc.CurrentContext = "node"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// provisionedVolume creates a claim the scheduler placed on node and waits
// for csi-provisioner's PV, then binds them as the PV controller would.
func provisionedVolume(t *testing.T, ctx context.Context, c client.Client, ns, sc, node string) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := create(t, ctx, c, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns, Annotations: map[string]string{
			selectedNode: node, "volume.kubernetes.io/storage-provisioner": ssdv1.DriverName}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	})
	pv := &corev1.PersistentVolume{}
	eventually(t, "csi-provisioner's PV for "+ns+"/data", func(ctx context.Context) error {
		return c.Get(ctx, client.ObjectKey{Name: "pvc-" + string(pvc.UID)}, pv)
	})
	t.Cleanup(func() { deletePVs(t, c, pv.Name) })
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != ssdv1.DriverName || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		t.Fatalf("csi-provisioner's PV: %+v", pv.Spec)
	}
	pv.Status.Phase = corev1.VolumeBound
	if err := c.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	// The in-process controller writes claims too (its auto-binding).
	update(t, ctx, c, pvc, func() { pvc.Spec.VolumeName = pv.Name })
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
			return err
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.Capacity = pv.Spec.Capacity
		pvc.Status.AccessModes = pv.Spec.AccessModes
		return c.Status().Update(ctx, pvc)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

func findCapacity(ctx context.Context, c client.Client, ns, sc, node string) error {
	list := &storagev1.CSIStorageCapacityList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, o := range list.Items {
		if o.StorageClassName == sc && o.NodeTopology != nil && o.NodeTopology.MatchLabels[ssdv1.TopologyKeyNode] == node {
			return nil
		}
	}
	return fmt.Errorf("none among %d objects", len(list.Items))
}

// setRequest asks for a larger volume, as `kubectl patch pvc` does.
func setRequest(t *testing.T, ctx context.Context, c client.Client, pvc *corev1.PersistentVolumeClaim, size string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"resources":{"requests":{"storage":"`+size+`"}}}}`))
	if err := c.Patch(ctx, pvc.DeepCopy(), patch); err != nil {
		t.Fatal(err)
	}
}

// waitGrown waits until pvc's PV has size as its capacity and the claim
// has it allocated: what the node plugin's resizer writes.
func waitGrown(t *testing.T, c client.Client, pvc *corev1.PersistentVolumeClaim, size, what string) {
	t.Helper()
	eventually(t, what, func(ctx context.Context) error {
		pv, claim := &corev1.PersistentVolume{}, &corev1.PersistentVolumeClaim{}
		if err := c.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv); err != nil {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pvc), claim); err != nil {
			return err
		}
		want := resource.MustParse(size)
		if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(want) != 0 {
			return fmt.Errorf("PV capacity %s", got.String())
		}
		if got := claim.Status.AllocatedResources[corev1.ResourceStorage]; got.Cmp(want) != 0 {
			return fmt.Errorf("claim's allocated size %s", got.String())
		}
		return nil
	})
}

// checkProvisionerLogs fails the test when the API server refused
// csi-provisioner anything: RBAC's "forbidden" or the policy's "denied".
func checkProvisionerLogs(t *testing.T, logs *syncBuffer) {
	t.Helper()
	out := logs.String()
	for _, refusal := range []string{"forbidden", "denied request"} {
		if strings.Contains(out, refusal) {
			t.Errorf("csi-provisioner was refused by the API server:\n%s", grepLines(out, refusal))
		}
	}
	if strings.Contains(out, "Failed to sync Informers") {
		t.Errorf("csi-provisioner could not sync its informers:\n%s", out)
	}
}
