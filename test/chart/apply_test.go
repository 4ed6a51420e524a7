package chart

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// apiServer is the kube-apiserver shared by the tests of this package that need
// one; skipWhy says why there is none.
var apiServer struct {
	client  client.Client
	config  *rest.Config // as cluster admin
	skipWhy string
}

func needAPIServer(t *testing.T) (context.Context, client.Client) {
	t.Helper()
	if apiServer.skipWhy != "" {
		t.Skip(apiServer.skipWhy)
	}
	return t.Context(), apiServer.client
}

func TestMain(m *testing.M) {
	flag.Parse()
	switch {
	case testing.Short():
		apiServer.skipWhy = "applying the chart needs a kube-apiserver; skipped under -short (run hack/test-api.sh)"
	case os.Getenv("KUBEBUILDER_ASSETS") == "":
		apiServer.skipWhy = "KUBEBUILDER_ASSETS is unset: run hack/test-api.sh, which builds kube-apiserver and etcd and sets it"
	}
	if apiServer.skipWhy != "" {
		os.Exit(m.Run())
	}
	env := &envtest.Environment{
		// The project's CRD, and stand-ins of the ServiceMonitor and PrometheusRule CRDs (see testdata/crds).
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "deploy", "crd"), filepath.Join("testdata", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	apiServer.config = cfg
	apiServer.client, err = client.New(cfg, client.Options{Scheme: scheme})
	code := 1
	if err == nil {
		code = m.Run()
	} else {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
	}
	os.Exit(code)
}

func ensureNamespace(t *testing.T, ctx context.Context, c client.Client, name string) {
	t.Helper()
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestAPIServerAcceptsRenderedChart applies every object of every values file
// server-side with dry run: the API server's validation, defaulting and
// admission (CRD schemas included) accept them as `helm install` would send them.
func TestAPIServerAcceptsRenderedChart(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	ensureNamespace(t, ctx, c, "monitoring")
	for _, f := range valuesFiles {
		t.Run(valuesName(f), func(t *testing.T) {
			r := render(t, f)
			for _, o := range append(append([]*unstructured.Unstructured{}, r.crds...), r.objects...) {
				err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.DryRunAll, client.FieldOwner("helm"), client.ForceOwnership)
				if err != nil {
					t.Errorf("%s %s/%s refused: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

// TestServiceAccountsHoldTheirPermissions creates the chart's ServiceAccounts
// and RBAC objects for real and asks the API server's own authorizer
// (SubjectAccessReview) about every permission each component needs: granted
// where needed, and namespace-scoped grants denied outside the release namespace.
func TestServiceAccountsHoldTheirPermissions(t *testing.T) {
	ctx, c := needAPIServer(t)
	ensureNamespace(t, ctx, c, releaseNS)
	for _, comp := range components {
		applyRBAC(t, ctx, c, render(t, comp.valuesFile))
	}
	for _, comp := range components {
		t.Run(comp.name, func(t *testing.T) {
			user := serviceAccountUser(comp.serviceAccount)
			for _, p := range comp.needs(t).sorted() {
				_, nsOnly := comp.namespaced[p.groupResource()]
				name := comp.resourceNames[p.groupResource()]
				if p.verb == "create" {
					name = "" // a create request carries no name for RBAC to match
				}
				ns := "elsewhere"
				if nsOnly {
					ns = releaseNS
					if allowed(t, ctx, c, user, p, "elsewhere", name) {
						t.Errorf("%s holds %s outside %s; it needs it only there", user, p, releaseNS)
					}
				}
				if !allowed(t, ctx, c, user, p, ns, name) {
					t.Errorf("the API server denies %s (name %q) to %s in namespace %s", p, name, user, ns)
				}
				if name != "" && allowed(t, ctx, c, user, p, ns, "another-object") {
					t.Errorf("%s holds %s on any name; it needs it only on %q", user, p, name)
				}
			}
		})
	}
}

// applyRBAC creates a render's ServiceAccounts and RBAC objects for real.
func applyRBAC(t *testing.T, ctx context.Context, c client.Client, r rendered) {
	t.Helper()
	rbacKinds := sets.New("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
	for _, o := range r.objects {
		if !rbacKinds.Has(o.GetKind()) {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("helm"), client.ForceOwnership); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func serviceAccountUser(name string) string {
	return "system:serviceaccount:" + releaseNS + ":" + name
}

func allowed(t *testing.T, ctx context.Context, c client.Client, user string, p perm, namespace, name string) bool {
	t.Helper()
	resource, sub, _ := strings.Cut(p.resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: p.verb, Group: p.group, Resource: resource, Subresource: sub, Name: name,
		},
	}}
	if err := c.Create(ctx, sar); err != nil {
		t.Fatalf("SubjectAccessReview for %s: %v", p, err)
	}
	return sar.Status.Allowed
}
