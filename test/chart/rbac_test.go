package chart

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// perm is one verb on one resource ("resource" or "resource/subresource") of an API group.
type perm struct{ group, resource, verb string }

func (p perm) String() string {
	g := p.group
	if g == "" {
		g = "core"
	}
	return g + "/" + p.resource + ":" + p.verb
}

func (p perm) groupResource() string { return p.group + "/" + p.resource }

type permSet map[perm]bool

func expand(rules []rbacv1.PolicyRule) permSet {
	s := permSet{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					s[perm{g, res, v}] = true
				}
			}
		}
	}
	return s
}

func (s permSet) add(o permSet) permSet {
	for p := range o {
		s[p] = true
	}
	return s
}

func (s permSet) sorted() []perm {
	out := make([]perm, 0, len(s))
	for p := range s {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// component is one binary's identity in the chart and what its code calls.
type component struct {
	name           string
	generated      string // ClusterRole generated from the markers by hack/generate.sh
	sources        string // package whose kubebuilder:rbac markers name what the code calls
	serviceAccount string // in the default render
	// sidecars are the permissions of sidecar containers sharing the ServiceAccount,
	// from their documentation (not in our code's markers).
	sidecars []rbacv1.PolicyRule
	// namespaced are group/resources the chart may grant in a Role of the release
	// namespace only, with the reason that is enough.
	namespaced map[string]string
	// resourceNames are group/resources the chart grants on one object only
	// (in the values file's render), except "create", which RBAC cannot
	// restrict by name.
	resourceNames map[string]string
	// valuesFile renders the chart with this component ("" is the defaults).
	valuesFile string
}

// provisionerRules are what external-provisioner v5 calls in distributed mode
// (--node-deployment) with topology and capacity tracking (--enable-capacity,
// --capacity-ownerref-level=1), read from its code (issue 37 point 4): PV,
// claim and StorageClass informers; PVs created, finalizer-patched and
// deleted; claims updated for the selected-node annotation; its
// VolumeAttributesClass lookup; core/v1 Events (client-go's recorder creates
// and patches them; update as its RBAC documents); CSIStorageCapacity
// informer, create, update and delete; its own pod read to find the
// DaemonSet. Node and CSINode come from fixed in-memory objects in
// distributed mode with topology, so none are read; no VolumeAttachments
// (attachRequired is false), no snapshots or clones (the driver has neither
// capability), no leases (no leader election on nodes).
var provisionerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"list", "watch", "create", "patch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"list", "watch", "update"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattributesclasses"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
}

var components = []component{
	{
		name: "controller", generated: "../../deploy/rbac/controller/role.yaml", sources: "../../pkg/controller",
		serviceAccount: "ssd-ssdcache-controller",
		namespaced: map[string]string{
			"coordination.k8s.io/leases": "the leader election Lease lives in the controller's namespace",
			"/events":                    "core/v1 Events come only from leader election, in the Lease's namespace",
		},
	},
	{
		name: "bench", generated: "../../deploy/rbac/bench/role.yaml", sources: "../../pkg/bench/reportcm",
		serviceAccount: "ssd-ssdcache-bench", valuesFile: "testdata/bench-tiny.yaml",
		namespaced:    map[string]string{"/configmaps": "the report ConfigMap lives in the Job's namespace"},
		resourceNames: map[string]string{"/configmaps": "ssd-ssdcache-bench-report"},
	},
	{
		name: "node", generated: "../../deploy/rbac/node/role.yaml", sources: "../../pkg/agent",
		serviceAccount: "ssd-ssdcache-node", sidecars: provisionerRules,
		namespaced: map[string]string{
			"storage.k8s.io/csistoragecapacities": "external-provisioner writes them into its own namespace ($NAMESPACE)",
			"/pods":                               "external-provisioner reads its own pod to find the DaemonSet that owns the capacity objects",
			"coordination.k8s.io/leases":          "each node agent renews its Lease in the release namespace",
		},
	},
}

var markerLine = regexp.MustCompile(`^\s*//\s*\+kubebuilder:rbac:(.+)$`)

// sourceMarkers parses the kubebuilder:rbac markers of a package's non-test files.
func sourceMarkers(t *testing.T, dir string) permSet {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var rules []rbacv1.PolicyRule
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		rules = append(rules, markersOfFile(t, f)...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no kubebuilder:rbac markers", dir)
	}
	return expand(rules)
}

func markersOfFile(t *testing.T, path string) []rbacv1.PolicyRule {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var rules []rbacv1.PolicyRule
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		m := markerLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var r rbacv1.PolicyRule
		for _, kv := range strings.Split(m[1], ",") {
			key, value, _ := strings.Cut(kv, "=")
			values := strings.Split(strings.ReplaceAll(value, `"`, ""), ";")
			switch key {
			case "groups":
				r.APIGroups = values
			case "resources":
				r.Resources = values
			case "verbs":
				r.Verbs = values
			}
		}
		rules = append(rules, r)
	}
	return rules
}

func generatedRole(t *testing.T, c component) permSet {
	t.Helper()
	data, err := os.ReadFile(c.generated)
	if err != nil {
		t.Fatalf("%s: %v (hack/generate.sh writes it with controller-gen from the markers in %s; "+
			"controller-gen ignores rbac markers inside a type's or func's doc comment: put them in a comment block of their own)",
			c.generated, err, c.sources)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatalf("%s: %v", c.generated, err)
	}
	return expand(role.Rules)
}

// TestGeneratedRBACMatchesMarkers: the generated ClusterRoles hold exactly the
// permissions the code's markers name, so stale or ignored markers show up.
func TestGeneratedRBACMatchesMarkers(t *testing.T) {
	for _, c := range components {
		if c.generated == "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			markers, generated := sourceMarkers(t, c.sources), generatedRole(t, c)
			for _, p := range markers.sorted() {
				if !generated[p] {
					t.Errorf("%s names %s but %s lacks it: run hack/generate.sh", c.sources, p, c.generated)
				}
			}
			for _, p := range generated.sorted() {
				if !markers[p] {
					t.Errorf("%s grants %s, which no marker in %s names: run hack/generate.sh", c.generated, p, c.sources)
				}
			}
		})
	}
}

// grants are the permissions the chart gives one ServiceAccount: cluster-wide
// through ClusterRoleBindings, and in the release namespace through RoleBindings.
type grants struct{ cluster, namespaced permSet }

func chartGrants(t *testing.T, r rendered, serviceAccount string) grants {
	t.Helper()
	g := grants{cluster: permSet{}, namespaced: permSet{}}
	for _, b := range bindingsOf(t, r, serviceAccount) {
		target := g.cluster
		if b.kind == "RoleBinding" {
			target = g.namespaced
		}
		target.add(expand(b.role.Rules))
	}
	return g
}

// boundRules are the rules of every role bound to the ServiceAccount.
func boundRules(t *testing.T, r rendered, serviceAccount string) []rbacv1.PolicyRule {
	t.Helper()
	var rules []rbacv1.PolicyRule
	for _, b := range bindingsOf(t, r, serviceAccount) {
		rules = append(rules, b.role.Rules...)
	}
	return rules
}

// binding is a (Cluster)RoleBinding of a ServiceAccount and the role it refers to.
type binding struct {
	kind string
	role *rbacv1.ClusterRole
}

func bindingsOf(t *testing.T, r rendered, serviceAccount string) []binding {
	t.Helper()
	var out []binding
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range r.ofKind(kind) {
			b := typed[rbacv1.RoleBinding](t, o)
			if !bindsServiceAccount(b, serviceAccount) {
				continue
			}
			role := typed[rbacv1.ClusterRole](t, r.one(t, b.RoleRef.Kind, b.RoleRef.Name))
			if kind == "RoleBinding" && b.RoleRef.Kind == "Role" && role.Namespace != b.Namespace {
				t.Errorf("RoleBinding %s refers to Role %s of another namespace", b.Name, role.Name)
			}
			out = append(out, binding{kind: kind, role: role})
		}
	}
	return out
}

func bindsServiceAccount(b *rbacv1.RoleBinding, name string) bool {
	for _, s := range b.Subjects {
		if s.Kind == "ServiceAccount" && s.Name == name && s.Namespace == releaseNS {
			return true
		}
	}
	return false
}

// needs are the permissions a component's pod needs: its markers (as written in
// the source and as generated) and its sidecars'.
func (c component) needs(t *testing.T) permSet {
	t.Helper()
	n := sourceMarkers(t, c.sources).add(expand(c.sidecars))
	if _, err := os.Stat(c.generated); err == nil {
		n.add(generatedRole(t, c))
	}
	return n
}

// TestChartRBACCoversCode: every verb on every resource that the code's RBAC
// markers (and the sidecars) need is granted to the component's ServiceAccount,
// cluster-wide, or in the release namespace where that is enough.
func TestChartRBACCoversCode(t *testing.T) {
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			g := chartGrants(t, render(t, c.valuesFile), c.serviceAccount)
			for _, p := range c.needs(t).sorted() {
				if g.cluster[p] {
					continue
				}
				if _, ok := c.namespaced[p.groupResource()]; ok && g.namespaced[p] {
					continue
				}
				t.Errorf("ServiceAccount %s lacks %s", c.serviceAccount, p)
			}
		})
	}
}

// TestChartRBACIsLeastPrivilege: the chart grants nothing that neither the code
// nor the sidecars need, no wildcard, and namespace-scoped grants stay in Roles.
func TestChartRBACIsLeastPrivilege(t *testing.T) {
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c.valuesFile)
			g := chartGrants(t, r, c.serviceAccount)
			needs := c.needs(t)
			for _, p := range (permSet{}).add(g.cluster).add(g.namespaced).sorted() {
				if p.group == "*" || p.resource == "*" || p.verb == "*" {
					t.Errorf("%s: wildcard grant %s", c.serviceAccount, p)
				}
				if !needs[p] {
					t.Errorf("%s is granted %s, which neither its code's markers nor its sidecars need", c.serviceAccount, p)
				}
			}
			for _, p := range g.cluster.sorted() {
				if reason, ok := c.namespaced[p.groupResource()]; ok {
					t.Errorf("%s gets %s cluster-wide; a Role suffices (%s)", c.serviceAccount, p, reason)
				}
			}
			checkResourceNames(t, r, c)
		})
	}
}

// checkResourceNames: every rule a component's bindings grant on a resource
// it needs on one object only names that object, unless it grants "create".
func checkResourceNames(t *testing.T, r rendered, c component) {
	t.Helper()
	for _, rule := range boundRules(t, r, c.serviceAccount) {
		for _, gr := range expand([]rbacv1.PolicyRule{rule}).sorted() {
			name, ok := c.resourceNames[gr.groupResource()]
			if !ok || gr.verb == "create" {
				continue
			}
			if len(rule.ResourceNames) != 1 || rule.ResourceNames[0] != name {
				t.Errorf("%s: %s granted on %q, want only on %q", c.serviceAccount, gr, rule.ResourceNames, name)
			}
		}
	}
}
