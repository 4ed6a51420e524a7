package chart

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/template"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ssdcache/ssdcache/pkg/controller"
)

type promRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type promRuleSpec struct {
	Groups []struct {
		Name  string     `json:"name"`
		Rules []promRule `json:"rules"`
	} `json:"groups"`
}

func ruleSpec(t *testing.T, o *unstructured.Unstructured) promRuleSpec {
	t.Helper()
	var spec promRuleSpec
	raw, _, _ := unstructured.NestedMap(o.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestPrometheusRuleNamesRealMetrics: every alert's expression names only
// series that the node plugin or the controller registers, so a renamed
// metric fails here rather than leaving an alert that never fires.
func TestPrometheusRuleNamesRealMetrics(t *testing.T) {
	r := render(t, "testdata/full.yaml")
	rule := r.one(t, "PrometheusRule", "ssd-ssdcache")
	if rule.GetNamespace() != "monitoring" || rule.GetLabels()["release"] != "prometheus" {
		t.Errorf("namespace %q, labels %v: want the values' namespace and labels", rule.GetNamespace(), rule.GetLabels())
	}
	known := knownMetricNames(t)
	for name := range controllerMetricNames(t) {
		known[name] = true
	}
	name := regexp.MustCompile(`\b(ssdcache_[a-z_]+|csi_[a-z_]+)\b`)
	var alerts []string
	for _, g := range ruleSpec(t, rule).Groups {
		for _, a := range g.Rules {
			alerts = append(alerts, a.Alert)
			used := name.FindAllString(a.Expr, -1)
			if len(used) == 0 {
				t.Errorf("alert %s: expression %q names no ssdcache series", a.Alert, a.Expr)
			}
			for _, m := range used {
				if !known[m] {
					t.Errorf("alert %s: expression %q uses %s, which no code exports", a.Alert, a.Expr, m)
				}
			}
			if a.Labels["severity"] != "critical" || a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
				t.Errorf("alert %s: labels %v, annotations %v; want the values' severity, a summary and a description", a.Alert, a.Labels, a.Annotations)
			}
		}
	}
	for _, want := range []string{"SSDCacheDropped", "SSDCacheFailing", "SSDCachePoolDown", "SSDCacheNodeNotReady", "SSDCacheVolumeWithoutCache"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
}

// TestPrometheusRuleWaitsAsConfigured: the values' for reaches the alerts
// that wait, and the descriptions keep Prometheus's templates (which Helm
// must pass through, not evaluate): each names the node from $labels.node
// and parses with Prometheus's template engine. TestPrometheusRulesFire
// expands them.
func TestPrometheusRuleWaitsAsConfigured(t *testing.T) {
	spec := ruleSpec(t, render(t, "testdata/full.yaml").one(t, "PrometheusRule", "ssd-ssdcache"))
	for _, g := range spec.Groups {
		for _, a := range g.Rules {
			switch a.Alert {
			case "SSDCachePoolDown", "SSDCacheNodeNotReady", "SSDCacheVolumeWithoutCache", "SSDCacheOriginPoolFull":
				if a.For != "10m" {
					t.Errorf("alert %s waits %q, want the values' 10m", a.Alert, a.For)
				}
			}
			d := a.Annotations["description"]
			if !strings.Contains(d, "$labels.node") {
				t.Errorf("alert %s: description %q does not name the node", a.Alert, d)
			}
			// As rules.AlertingRule.Eval expands it; ParseTest checks the syntax only.
			exp := template.NewTemplateExpander(context.Background(), "{{$labels := .Labels}}"+d, a.Alert, nil, 0, nil, nil, nil)
			if err := exp.ParseTest(); err != nil {
				t.Errorf("alert %s: description %q: %v", a.Alert, d, err)
			}
		}
	}
}

// controllerMetricNames are the series ssdcache-controller registers of its own.
func controllerMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	descName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 4)
	go func() { controller.NewBindingCollector(nil, nil).Describe(ch); close(ch) }()
	for desc := range ch {
		if m := descName.FindStringSubmatch(desc.String()); m != nil {
			known[m[1]] = true
		}
	}
	return known
}
