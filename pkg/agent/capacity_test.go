package agent

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// The Node gets the pool's size, extent size and block size of new caches,
// from which admission charges each cache its LVs; the older capacity
// annotation (the pool less the metadata reserve, for older controllers);
// its free bytes and its class. A node whose cache pool is not up reports 0
// and no class, although its plugin is configured with one.
func TestCapacityReportNamesCapacityFreeBytesAndClass(t *testing.T) {
	l, clk, m := poolWorld(t)
	if _, err := l.CreateLV(context.Background(), "ssdcache-nvme", "c", 1<<30, lvm.Tags("v", lvm.RoleCacheData)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cacheVGs []string
		want     map[string]string
	}{
		{[]string{"ssdcache-nvme"}, map[string]string{
			ssdv1.AnnotationCachePoolBytes: "10737418240", ssdv1.AnnotationCacheExtentBytes: "4194304",
			ssdv1.AnnotationCacheBlockBytes: "131072", ssdv1.AnnotationCacheCapacityBytes: "10522669836",
			ssdv1.AnnotationCacheFreeBytes: "9663676416", ssdv1.AnnotationDeviceClass: "nvme", ssdv1.AnnotationDeviceClassDeprecated: "nvme",
		}},
		{nil, map[string]string{
			ssdv1.AnnotationCachePoolBytes: "0", ssdv1.AnnotationCacheExtentBytes: "0",
			ssdv1.AnnotationCacheBlockBytes: "131072", ssdv1.AnnotationCacheCapacityBytes: "0",
			ssdv1.AnnotationCacheFreeBytes: "0", ssdv1.AnnotationDeviceClass: "", ssdv1.AnnotationDeviceClassDeprecated: "",
		}},
	} {
		w := NewPoolWatch(l, "ssdcache-hdd", c.cacheVGs, m, PoolWatchOptions{Clock: clk})
		if err := w.Scan(context.Background()); err != nil {
			t.Fatal(err)
		}
		api := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}).Build()
		if err := NewCapacityReporter(api, api, w, node, "nvme", 256, 0).Report(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := &corev1.Node{}
		if err := api.Get(context.Background(), client.ObjectKey{Name: node}, got); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got.Annotations, c.want) {
			t.Errorf("pools %v: annotations %v; want %v", c.cacheVGs, got.Annotations, c.want)
		}
	}
}
