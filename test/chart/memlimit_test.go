package chart

import (
	"math"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ssdcache/ssdcache/pkg/memlimit"
)

// nodeAllocatable is what the downward API gives for limits.memory when the
// container has none: the node's allocatable memory.
var nodeAllocatable = resource.MustParse("64Gi")

// downwardEnv resolves a container's env as kubelet would for the
// variables memlimit reads: plain values, and resourceFieldRef
// limits.memory divided by its divisor, rounded up.
func downwardEnv(t *testing.T, c corev1.Container) func(string) string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ResourceFieldRef != nil:
			ref := e.ValueFrom.ResourceFieldRef
			if ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != c.Name) {
				t.Fatalf("container %s: %s refers to %s of %q, want its own limits.memory", c.Name, e.Name, ref.Resource, ref.ContainerName)
			}
			limit, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok {
				limit = nodeAllocatable
			}
			divisor := ref.Divisor.Value()
			if divisor == 0 {
				divisor = 1
			}
			env[e.Name] = resource.NewQuantity((limit.Value()+divisor-1)/divisor, resource.DecimalSI).String()
		}
	}
	return func(k string) string { return env[k] }
}

// goMemoryLimit is the soft limit the binary in c would set.
func goMemoryLimit(t *testing.T, c corev1.Container) memlimit.Limit {
	t.Helper()
	current := int64(math.MaxInt64)
	l, err := memlimit.Apply(downwardEnv(t, c), func(n int64) int64 {
		prev := current
		if n >= 0 {
			current = n
		}
		return prev
	})
	if err != nil {
		t.Fatalf("container %s: %v", c.Name, err)
	}
	if l.SoftLimit != 0 && current != l.SoftLimit {
		t.Fatalf("container %s: the runtime got %d, Apply said %d", c.Name, current, l.SoftLimit)
	}
	return l
}

// memoryContainers are the ssdcache-controller container and the
// ssdcache-node container of every node DaemonSet of a render.
func memoryContainers(t *testing.T, r rendered) []corev1.Container {
	t.Helper()
	d := typed[appsv1.Deployment](t, r.one(t, "Deployment", "ssd-ssdcache-controller"))
	out := []corev1.Container{container(t, d.Spec.Template.Spec, "ssdcache-controller")}
	for _, o := range r.ofKind("DaemonSet") {
		ds := typed[appsv1.DaemonSet](t, o)
		out = append(out, container(t, ds.Spec.Template.Spec, "ssdcache-node"))
	}
	return out
}

func mib(n float64) int64 { return int64(n * (1 << 20)) }

// TestGoMemoryLimitFollowsTheContainerLimit (#37 point 5): the controller's
// Go runtime collects harder as its heap nears 90 % of its 512Mi limit
// instead of growing into the OOM killer; the node plugin, which has no
// limit by default, gets 90 % of the node's memory, which binds no earlier
// than no limit would.
func TestGoMemoryLimitFollowsTheContainerLimit(t *testing.T) {
	for _, f := range valuesFiles {
		r := render(t, f)
		for _, c := range memoryContainers(t, r) {
			l := goMemoryLimit(t, c)
			want := mib(512 * 0.9)
			if c.Name == "ssdcache-node" {
				want = int64(float64(nodeAllocatable.Value()) * 0.9)
			}
			if l.SoftLimit != want || l.Ratio != 0.9 {
				t.Errorf("%s: %s gets %s, want a soft limit of %d bytes", valuesName(f), c.Name, l, want)
			}
		}
	}
}

func TestGoMemoryLimitValues(t *testing.T) {
	ch := loadChart(t)
	cases := []struct {
		name                 string
		values               map[string]any
		controller, nodeSoft int64 // 0: no soft limit
	}{
		{"own ratios", map[string]any{"controller": map[string]any{"memoryLimitRatio": 0.75}, "node": map[string]any{"memoryLimitRatio": 0.85}},
			mib(512 * 0.75), int64(float64(nodeAllocatable.Value()) * 0.85)},
		{"a node limit", map[string]any{"node": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "256Mi"}}}},
			mib(512 * 0.9), mib(256 * 0.9)},
		{"a controller limit in Gi", map[string]any{"controller": map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": "1Gi"}}}},
			mib(1024 * 0.9), int64(float64(nodeAllocatable.Value()) * 0.9)},
		{"ratio 1", map[string]any{"controller": map[string]any{"memoryLimitRatio": 1}}, mib(512), int64(float64(nodeAllocatable.Value()) * 0.9)},
		// helm --set passes 0.85 as a string.
		{"ratios from --set", map[string]any{"controller": map[string]any{"memoryLimitRatio": "0.85"}, "node": map[string]any{"memoryLimitRatio": ".5"}},
			mib(512 * 0.85), nodeAllocatable.Value() / 2},
		{"turned off", map[string]any{"controller": map[string]any{"memoryLimitRatio": 0}, "node": map[string]any{"memoryLimitRatio": 0}}, 0, 0},
		{"turned off by --set", map[string]any{"controller": map[string]any{"memoryLimitRatio": "0"}, "node": map[string]any{"memoryLimitRatio": "0.0"}}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := renderValues(ch, c.values)
			if err != nil {
				t.Fatal(err)
			}
			for _, ctr := range memoryContainers(t, r) {
				want := c.nodeSoft
				if ctr.Name == "ssdcache-controller" {
					want = c.controller
				}
				if l := goMemoryLimit(t, ctr); l.SoftLimit != want {
					t.Errorf("%s gets %s, want a soft limit of %d bytes", ctr.Name, l, want)
				}
				if want == 0 {
					for _, e := range ctr.Env {
						if strings.HasPrefix(e.Name, "SSDCACHE_MEMORY_LIMIT") {
							t.Errorf("%s: %s rendered with the ratio 0", ctr.Name, e.Name)
						}
					}
				}
			}
		})
	}
}

func TestGoMemoryLimitRatioIsAShare(t *testing.T) {
	ch := loadChart(t)
	for _, bad := range []any{1.5, -0.1, "90%", "1.5", "-0.1", "0.9Gi", true} {
		for _, component := range []string{"controller", "node"} {
			values := map[string]any{component: map[string]any{"memoryLimitRatio": bad}}
			_, err := renderValues(ch, values)
			if err == nil || !strings.Contains(err.Error(), "memoryLimitRatio") {
				t.Errorf("%s.memoryLimitRatio=%v: error %v, want the schema to refuse it", component, bad, err)
			}
		}
	}
}
