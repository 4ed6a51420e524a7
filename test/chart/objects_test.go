package chart

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestEveryValuesFileRendersTypedObjects converts every rendered object of a
// known kind into its Go type with unknown fields refused, and checks that no
// two objects share kind, namespace and name.
func TestEveryValuesFileRendersTypedObjects(t *testing.T) {
	for _, f := range valuesFiles {
		t.Run(valuesName(f), func(t *testing.T) {
			r := render(t, f)
			seen := map[string]bool{}
			for _, o := range r.objects {
				key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
				if seen[key] {
					t.Errorf("%s rendered twice", key)
				}
				seen[key] = true
				checkTyped(t, o)
			}
			if len(r.crds) != 1 || r.crds[0].GetName() != "cachebindings.ssdcache.io" {
				t.Errorf("chart CRDs = %v, want cachebindings.ssdcache.io", r.crds)
			}
		})
	}
}

func checkTyped(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	switch o.GetKind() {
	case "DaemonSet":
		typed[appsv1.DaemonSet](t, o)
	case "Deployment":
		typed[appsv1.Deployment](t, o)
	case "Job":
		typed[batchv1.Job](t, o)
	case "Service":
		typed[corev1.Service](t, o)
	case "ServiceAccount":
		typed[corev1.ServiceAccount](t, o)
	case "ConfigMap":
		typed[corev1.ConfigMap](t, o)
	case "PersistentVolumeClaim":
		typed[corev1.PersistentVolumeClaim](t, o)
	case "ClusterRole", "Role":
		typed[rbacv1.ClusterRole](t, o)
	case "ClusterRoleBinding", "RoleBinding":
		typed[rbacv1.ClusterRoleBinding](t, o)
	case "CSIDriver":
		typed[storagev1.CSIDriver](t, o)
	case "StorageClass":
		typed[storagev1.StorageClass](t, o)
	case "ValidatingAdmissionPolicy":
		typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, o)
	case "ValidatingAdmissionPolicyBinding":
		typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, o)
	case "ServiceMonitor", "PrometheusRule":
		// No Go type here; apply_test.go checks them against stand-in CRDs.
	default:
		t.Errorf("unexpected kind %s (%s): add it to this test", o.GetKind(), o.GetName())
	}
}

func TestCSIDriver(t *testing.T) {
	d := typed[storagev1.CSIDriver](t, render(t, "").one(t, "CSIDriver", ssdv1.DriverName))
	s := d.Spec
	if s.AttachRequired == nil || *s.AttachRequired {
		t.Error("attachRequired must be false: volumes are node-local")
	}
	if s.PodInfoOnMount == nil || *s.PodInfoOnMount {
		t.Error("podInfoOnMount must be false")
	}
	if s.StorageCapacity == nil || !*s.StorageCapacity {
		t.Error("storageCapacity must be true: the scheduler uses CSIStorageCapacity")
	}
	if !slices.Equal(s.VolumeLifecycleModes, []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}) {
		t.Errorf("volumeLifecycleModes = %v, want [Persistent] (no ephemeral volumes)", s.VolumeLifecycleModes)
	}
	if s.FSGroupPolicy == nil || *s.FSGroupPolicy != storagev1.FileFSGroupPolicy {
		t.Errorf("fsGroupPolicy = %v, want File", s.FSGroupPolicy)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func mustHaveArgs(t *testing.T, c corev1.Container, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(c.Args, w) {
			t.Errorf("container %s: no argument %q in %q", c.Name, w, c.Args)
		}
	}
}

func argWithPrefix(c corev1.Container, prefix string) (string, bool) {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v, true
		}
	}
	return "", false
}

func envFromField(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

func hasEnv(c corev1.Container, name, value string) bool {
	for _, e := range c.Env {
		if e.Name == name && e.Value == value {
			return true
		}
	}
	return false
}

func mountAt(c corev1.Container, path string) (corev1.VolumeMount, bool) {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}

func TestNodePluginContainer(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, render(t, "testdata/full.yaml").one(t, "DaemonSet", "ssd-ssdcache-node"))
	spec := ds.Spec.Template.Spec
	node := container(t, spec, "ssdcache-node")
	if node.SecurityContext == nil || node.SecurityContext.Privileged == nil || !*node.SecurityContext.Privileged {
		t.Error("ssdcache-node must be privileged (device-mapper, LVM, Bidirectional mounts)")
	}
	// The image runs as 65532 for the controller and the bench; LVM needs root.
	if sc := node.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("ssdcache-node must run as root (runAsUser 0): the image's default user is 65532")
	}
	if spec.HostPID || spec.HostNetwork {
		t.Error("the node pod needs neither hostPID nor hostNetwork")
	}
	if !hasEnv(node, "DM_DISABLE_UDEV", "1") {
		t.Error("ssdcache-node needs DM_DISABLE_UDEV=1: without the host's IPC namespace, dmsetup waits for udev cookies forever")
	}
	if got := envFromField(node, "NODE_NAME"); got != "spec.nodeName" {
		t.Errorf("NODE_NAME comes from %q, want spec.nodeName", got)
	}
	mustHaveArgs(t, node,
		"--origin-devices=/dev/disk/by-id/wwn-0x5000c500a1b2c3d4,/dev/disk/by-id/wwn-0x5000c500a1b2c3d5",
		"--cache-devices=/dev/disk/by-id/nvme-eui.0025388b71b2c3d4",
		"--adopt-devices=/dev/disk/by-id/nvme-eui.0025388b71b2c3d4",
		"--origin-vg=ssdcache-hdd", "--cache-vg=ssdcache-nvme", "--device-class=fast",
		`--lvm-config=devices { global_filter = [ "a|/dev/disk/by-id/.*|", "r|.*|" ] }`,
		"--max-volumes-per-node=32", "--metrics-address=:9810", "--csi-endpoint=unix:///csi/csi.sock")
	if len(node.Command) != 1 || node.Command[0] != "/usr/local/bin/ssdcache-node" {
		t.Errorf("command = %q: the image's entrypoint is the controller", node.Command)
	}
	kubelet, ok := mountAt(node, "/var/lib/kubelet")
	if !ok || kubelet.MountPropagation == nil || *kubelet.MountPropagation != corev1.MountPropagationBidirectional {
		t.Errorf("kubelet dir mount = %+v, want Bidirectional at /var/lib/kubelet", kubelet)
	}
	for _, p := range []string{"/dev", "/sys", "/csi", "/run/lock/lvm"} {
		if _, ok := mountAt(node, p); !ok {
			t.Errorf("ssdcache-node does not mount %s", p)
		}
	}
	if udev, ok := mountAt(node, "/run/udev"); !ok || !udev.ReadOnly {
		t.Errorf("/run/udev mount = %+v, want read-only", udev)
	}
	if hostPathOf(spec, "socket-dir") != "/var/lib/kubelet/plugins/ssdcache.io" {
		t.Errorf("socket dir = %q", hostPathOf(spec, "socket-dir"))
	}
}

func hostPathOf(spec corev1.PodSpec, volume string) string {
	for _, v := range spec.Volumes {
		if v.Name == volume && v.HostPath != nil {
			return v.HostPath.Path
		}
	}
	return ""
}

func TestNodeSidecars(t *testing.T) {
	ds := typed[appsv1.DaemonSet](t, render(t, "").one(t, "DaemonSet", "ssd-ssdcache-node"))
	spec := ds.Spec.Template.Spec
	prov := container(t, spec, "csi-provisioner")
	mustHaveArgs(t, prov, "--node-deployment=true", "--enable-capacity=true", "--capacity-ownerref-level=1", "--extra-create-metadata=true",
		"--feature-gates=Topology=true", "--strict-topology=true", "--immediate-topology=false",
		"--node-deployment-immediate-binding=false", "--leader-election=false", "--csi-address=/csi/csi.sock")
	for name, field := range map[string]string{"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"} {
		if got := envFromField(prov, name); got != field {
			t.Errorf("csi-provisioner env %s from %q, want %q", name, got, field)
		}
	}
	reg := container(t, spec, "node-driver-registrar")
	// Its health check asks the registration socket within --timeout: 1s (the
	// default) failed every liveness probe on a busy node.
	mustHaveArgs(t, reg, "--kubelet-registration-path=/var/lib/kubelet/plugins/ssdcache.io/csi.sock", "--timeout=9s")
	if hostPathOf(spec, "registration-dir") != "/var/lib/kubelet/plugins_registry" {
		t.Errorf("registration dir = %q", hostPathOf(spec, "registration-dir"))
	}
	for _, c := range spec.Containers {
		if c.Name == "ssdcache-node" {
			continue
		}
		sc := c.SecurityContext
		if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("sidecar %s must run unprivileged without privilege escalation: %+v", c.Name, sc)
		}
	}
	expectBusyNodeProbes(t, container(t, spec, "ssdcache-node"))
	if spec.Containers[0].Name != "ssdcache-node" {
		t.Errorf("first container is %s: ssdcache-node must start first, its postStart hook holds the sidecars back", spec.Containers[0].Name)
	}
	reg = container(t, spec, "node-driver-registrar")
	for name, p := range map[string]*corev1.Probe{"startup": reg.StartupProbe, "liveness": reg.LivenessProbe} {
		if p == nil || p.TimeoutSeconds < 10 || p.PeriodSeconds*p.FailureThreshold < 60 {
			t.Errorf("node-driver-registrar %s probe = %+v: want a timeout of 10s or more and at least a minute before giving up", name, p)
		}
	}
}

// expectBusyNodeProbes checks the plugin's own probes: startup and liveness
// on /healthz, readiness on /readyz, all on its health port, with timeouts
// and thresholds that a busy node's slow answers do not turn into restarts.
// (A livenessprobe sidecar probing CSI Probe, which ran LVM, killed the
// plugin mid-lvremove on a slow node.)
func expectBusyNodeProbes(t *testing.T, node corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
		minWindow  int32
	}{
		{"startup", "/healthz", node.StartupProbe, 10 * 60},
		{"liveness", "/healthz", node.LivenessProbe, 60},
		{"readiness", "/readyz", node.ReadinessProbe, 0},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "health" {
			t.Errorf("ssdcache-node %s probe = %+v, want %s on port health", p.name, p.probe, p.path)
			continue
		}
		if p.probe.TimeoutSeconds < 10 {
			t.Errorf("ssdcache-node %s probe timeout %ds: too short for a busy node", p.name, p.probe.TimeoutSeconds)
		}
		if window := p.probe.PeriodSeconds * p.probe.FailureThreshold; window < p.minWindow {
			t.Errorf("ssdcache-node %s probe gives up after %ds, want at least %ds", p.name, window, p.minWindow)
		}
	}
	if c := slices.IndexFunc(node.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" }); c < 0 {
		t.Errorf("ssdcache-node has no port named health: %+v", node.Ports)
	}
	mustHaveArgs(t, node, "--pool-stale-after=5m")
	// The sidecars start only once the plugin serves, within the startup window.
	hook := node.Lifecycle
	if hook == nil || hook.PostStart == nil || hook.PostStart.Exec == nil ||
		!slices.Contains(hook.PostStart.Exec.Command, "--await-csi=900s") {
		t.Errorf("ssdcache-node postStart = %+v, want ssdcache-node --await-csi=900s", hook)
	}
}

func TestNodeGroupsRenderOneDaemonSetEach(t *testing.T) {
	r := render(t, "testdata/groups.yaml")
	sets := r.ofKind("DaemonSet")
	if len(sets) != 2 {
		t.Fatalf("DaemonSets = %v, want one per node group", r.names())
	}
	a := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", "ssd-ssdcache-node-rack-a"))
	b := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", "ssd-ssdcache-node-rack-b"))
	if maps.Equal(a.Spec.Selector.MatchLabels, b.Spec.Selector.MatchLabels) {
		t.Error("the groups' DaemonSets share a selector")
	}
	if a.Spec.Template.Spec.NodeSelector["ssdcache.io/group"] != "rack-a" || a.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("rack-a nodeSelector = %v, want its group merged with the defaults", a.Spec.Template.Spec.NodeSelector)
	}
	nodeA := container(t, a.Spec.Template.Spec, "ssdcache-node")
	mustHaveArgs(t, nodeA, "--origin-devices=/dev/disk/by-id/wwn-0x5000c500aaaa0001",
		"--cache-devices=/dev/disk/by-id/nvme-shared-model-serial", "--device-class=nvme")
	nodeB := container(t, b.Spec.Template.Spec, "ssdcache-node")
	mustHaveArgs(t, nodeB, "--origin-devices=/dev/disk/by-id/wwn-0x5000c500bbbb0001", "--device-class=sata")
	if v, ok := argWithPrefix(nodeB, "--cache-devices="); ok {
		t.Errorf("rack-b set cacheDevices: [] but got --cache-devices=%s", v)
	}
}

func TestControllerDeployment(t *testing.T) {
	d := typed[appsv1.Deployment](t, render(t, "testdata/full.yaml").one(t, "Deployment", "ssd-ssdcache-controller"))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2 from the values", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	c := container(t, spec, "ssdcache-controller")
	mustHaveArgs(t, c, "--leader-elect=true", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081")
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Error("the controller must run as non-root")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the controller needs no writable root filesystem")
	}
	if spec.ServiceAccountName != "ssd-ssdcache-controller" {
		t.Errorf("serviceAccountName = %q", spec.ServiceAccountName)
	}
}

// TestOptionalObjects: off by default, on when asked; the ServiceMonitor is
// rendered only when enabled, so clusters without its CRD install cleanly.
func TestOptionalObjects(t *testing.T) {
	cases := map[string]map[string]int{
		"":                            {"StorageClass": 0, "Job": 0, "ServiceMonitor": 0, "PrometheusRule": 0, "ConfigMap": 1, "Service": 2, "CSIDriver": 1, "ClusterRole": 2, "Role": 2},
		"testdata/full.yaml":          {"StorageClass": 1, "Job": 1, "PersistentVolumeClaim": 1, "ServiceMonitor": 2, "PrometheusRule": 1, "ConfigMap": 1, "ServiceAccount": 3, "Role": 3, "RoleBinding": 3},
		"testdata/external-rbac.yaml": {"ClusterRole": 0, "Role": 0, "RoleBinding": 0, "ServiceAccount": 0, "CSIDriver": 0, "Service": 0, "ConfigMap": 0, "Job": 1},
	}
	for f, want := range cases {
		r := render(t, f)
		for kind, n := range want {
			if got := len(r.ofKind(kind)); got != n {
				t.Errorf("%s: %d %s objects, want %d", valuesName(f), got, kind, n)
			}
		}
	}
}

func TestStorageClassParameters(t *testing.T) {
	sc := typed[storagev1.StorageClass](t, render(t, "testdata/full.yaml").one(t, "StorageClass", "hdd-cached"))
	want := map[string]string{ssdv1.ParamCacheMode: ssdv1.CacheModeReadCache, ssdv1.ParamCacheSize: "20Gi",
		ssdv1.ParamDeviceClass: "fast", "csi.storage.k8s.io/fstype": "xfs"}
	if !maps.Equal(sc.Parameters, want) {
		t.Errorf("parameters = %v, want %v", sc.Parameters, want)
	}
	if sc.Provisioner != ssdv1.DriverName || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		t.Errorf("provisioner %q, binding mode %v", sc.Provisioner, sc.VolumeBindingMode)
	}
	if sc.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
		t.Error("isDefault did not annotate the class")
	}
	// The driver refuses a cache size without cache-mode readcache.
	plain := typed[storagev1.StorageClass](t, render(t, "testdata/groups.yaml").one(t, "StorageClass", "ssd-ssdcache-cached"))
	if _, ok := plain.Parameters[ssdv1.ParamCacheSize]; ok || plain.Parameters[ssdv1.ParamCacheMode] != ssdv1.CacheModeNone {
		t.Errorf("cacheMode none parameters = %v, want no cache size", plain.Parameters)
	}
}

func TestBenchJob(t *testing.T) {
	r := render(t, "testdata/full.yaml")
	job := r.benchJob(t)
	pvc := typed[corev1.PersistentVolumeClaim](t, r.one(t, "PersistentVolumeClaim", "ssd-ssdcache-bench-1-ws1"))
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "hdd-cached" {
		t.Errorf("bench PVC class = %v, want the chart's StorageClass", pvc.Spec.StorageClassName)
	}
	spec := job.Spec.Template.Spec
	c := container(t, spec, "bench")
	if len(c.Command) != 1 || c.Command[0] != "/usr/local/bin/ssdcache-bench" {
		t.Errorf("command = %q", c.Command)
	}
	mustHaveArgs(t, c, "-target=volume=/data/ws-{ws}/bench.dat", "-cache-size=2Gi", "-working-sets=50%", "-runs=3", "-interval=30s")
	if spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil || *spec.SecurityContext.FSGroup != 65532 {
		t.Error("the bench runs as 65532 and needs fsGroup 65532 to write to the new filesystem")
	}
	if spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name {
		t.Errorf("the Job mounts %q, not the bench PVC", spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	}
	if spec.ServiceAccountName != "ssd-ssdcache-bench" {
		t.Errorf("serviceAccountName = %q, want the bench's own", spec.ServiceAccountName)
	}
	mustHaveArgs(t, c, "-report-configmap=ssd-ssdcache-bench-report")
	r.one(t, "ServiceAccount", "ssd-ssdcache-bench")
	r.one(t, "RoleBinding", "ssd-ssdcache-bench")
	role := typed[rbacv1.Role](t, r.one(t, "Role", "ssd-ssdcache-bench"))
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"ssd-ssdcache-bench-report"}, Verbs: []string{"patch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("bench Role rules %+v, want %+v", role.Rules, want)
	}
}

// TestBenchJobWithExternalRBAC: named ServiceAccount and ConfigMap, no RBAC objects.
func TestBenchJobWithExternalRBAC(t *testing.T) {
	r := render(t, "testdata/external-rbac.yaml")
	spec := r.benchJob(t).Spec.Template.Spec
	if spec.ServiceAccountName != "storage-bench" {
		t.Errorf("serviceAccountName = %q, want storage-bench from the values", spec.ServiceAccountName)
	}
	// helm template cannot read the class, so the values give its cache size.
	mustHaveArgs(t, container(t, spec, "bench"), "-report-configmap=bench-results", "-cache-size=5%", "-volume-size=50Gi")
	pvc := typed[corev1.PersistentVolumeClaim](t, r.one(t, "PersistentVolumeClaim", "ssd-ssdcache-bench-1-ws1"))
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "cached-by-platform-team" {
		t.Errorf("bench PVC class = %v, want bench.storageClassName", pvc.Spec.StorageClassName)
	}
}

// TestTinyBenchValues: the values test/e2e uses reach the Job's flags unchanged.
func TestTinyBenchValues(t *testing.T) {
	r := render(t, "testdata/bench-tiny.yaml")
	c := container(t, r.benchJob(t).Spec.Template.Spec, "bench")
	mustHaveArgs(t, c, "-cache-size=64Mi", "-working-sets=50%", "-runs=2", "-interval=2s", "-tests=read",
		"-report-configmap=ssd-ssdcache-bench-report")
	pvc := typed[corev1.PersistentVolumeClaim](t, r.one(t, "PersistentVolumeClaim", "ssd-ssdcache-bench-1-ws1"))
	if got := pvc.Spec.Resources.Requests.Storage().String(); got != "1Gi" {
		t.Errorf("bench PVC requests %s, want 1Gi", got)
	}
}

func TestMetricsServicesSelectPods(t *testing.T) {
	r := render(t, "")
	nodeSvc := typed[corev1.Service](t, r.one(t, "Service", "ssd-ssdcache-node-metrics"))
	ds := typed[appsv1.DaemonSet](t, r.one(t, "DaemonSet", "ssd-ssdcache-node"))
	ctlSvc := typed[corev1.Service](t, r.one(t, "Service", "ssd-ssdcache-controller-metrics"))
	dep := typed[appsv1.Deployment](t, r.one(t, "Deployment", "ssd-ssdcache-controller"))
	for _, c := range []struct {
		svc  *corev1.Service
		pod  corev1.PodTemplateSpec
		port int32
	}{{nodeSvc, ds.Spec.Template, 9810}, {ctlSvc, dep.Spec.Template, 8080}} {
		for k, v := range c.svc.Spec.Selector {
			if c.pod.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, which its pods lack", c.svc.Name, k, v)
			}
		}
		if c.svc.Spec.Ports[0].Port != c.port || !podHasPort(c.pod.Spec, c.svc.Spec.Ports[0].TargetPort.String()) {
			t.Errorf("Service %s port %+v does not reach the pods' metrics port", c.svc.Name, c.svc.Spec.Ports[0])
		}
	}
}

func podHasPort(spec corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}
