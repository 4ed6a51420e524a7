package agent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// The Node gets the pool's capacity (less the metadata reserve), its free
// bytes and its class; a node whose cache pool is not up reports 0 and no
// class, although its plugin is configured with one.
func TestCapacityReportNamesCapacityFreeBytesAndClass(t *testing.T) {
	l, clk, m := poolWorld(t)
	if _, err := l.CreateLV(context.Background(), "ssdcache-nvme", "c", 1<<30, lvm.Tags("v", lvm.RoleCacheData)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cacheVGs                  []string
		class, capacity, freeText string
	}{
		{[]string{"ssdcache-nvme"}, "nvme", "10522669836", "9663676416"},
		{nil, "", "0", "0"},
	} {
		w := NewPoolWatch(l, "ssdcache-hdd", c.cacheVGs, m, PoolWatchOptions{Clock: clk})
		if err := w.Scan(context.Background()); err != nil {
			t.Fatal(err)
		}
		api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}).Build()
		if err := NewCapacityReporter(api, api, w, node, "nvme", 0).Report(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := &corev1.Node{}
		if err := api.Get(context.Background(), client.ObjectKey{Name: node}, got); err != nil {
			t.Fatal(err)
		}
		a := got.Annotations
		if a[ssdv1.AnnotationCacheCapacityBytes] != c.capacity || a[ssdv1.AnnotationCacheFreeBytes] != c.freeText ||
			a[ssdv1.AnnotationCacheDeviceClass] != c.class {
			t.Errorf("pools %v: annotations %v; want capacity %s, free %s, class %q", c.cacheVGs, a, c.capacity, c.freeText, c.class)
		}
	}
}
