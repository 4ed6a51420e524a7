package api

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ssdcache/ssdcache/pkg/agent"
)

// memClaims is how many claims TestClaimCacheMemoryAtScale creates.
const memClaims = 10000

// TestClaimCacheMemoryAtScale is a benchmark (issue 37 point 5): the Go heap
// one node plugin's cache takes for the cluster's claims, which the resizer
// must watch cluster-wide (a claim names no node to select by), held as
// agent.CacheOptions' stubs and, for comparison, whole (managedFields
// stripped, as before). Its claims carry what real ones do: the annotations
// of the scheduler, the provisioner, the PV controller and kubectl apply, and
// two labels. It checks only that the stubs take less.
//
// Measured on 2026-12-05 (2 cores, loaded), three runs: 10,000 claims take
// 34.9 to 35.2 MiB whole and 6.2 to 8.0 MiB as stubs.
func TestClaimCacheMemoryAtScale(t *testing.T) {
	if os.Getenv("SSDCACHE_API_SCALE") == "" {
		t.Skip("a benchmark: set SSDCACHE_API_SCALE=1")
	}
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	var g errgroup.Group
	g.SetLimit(32)
	for i := range memClaims {
		g.Go(func() error { return createRealisticClaim(ctx, c, ns, fmt.Sprintf("c%05d", i)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	stubs := claimCacheHeap(t, ctx, agent.CacheOptions("node-a"))
	whole := claimCacheHeap(t, ctx, crcache.Options{DefaultTransform: crcache.TransformStripManagedFields()})
	t.Logf("one node plugin's cache of %d claims: %.1f MiB of Go heap as stubs (agent.CacheOptions), %.1f MiB whole",
		memClaims, mib(stubs), mib(whole))
	if stubs >= whole {
		t.Errorf("the stubs take %d bytes of heap, no less than whole claims' %d", stubs, whole)
	}
}

// createRealisticClaim creates a bound claim as a cluster holds it.
func createRealisticClaim(ctx context.Context, c client.Client, ns, name string) error {
	class := "ssdcache"
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}
	modes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/name": "db", "app.kubernetes.io/instance": "db-" + name},
			Annotations: map[string]string{
				"volume.kubernetes.io/selected-node":            "node-0123456789abcdef",
				"volume.kubernetes.io/storage-provisioner":      "ssdcache.io",
				"volume.beta.kubernetes.io/storage-provisioner": "ssdcache.io",
				"pv.kubernetes.io/bind-completed":               "yes",
				"pv.kubernetes.io/bound-by-controller":          "yes",
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"annotations":{},"name":"` +
					name + `","namespace":"` + ns + `"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"10Gi"}},"storageClassName":"ssdcache"}}`,
			}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: modes, StorageClassName: &class, VolumeName: "pvc-" + name + "-0000-0000-0000-000000000000",
			Resources: corev1.VolumeResourceRequirements{Requests: size}},
	}
	if err := c.Create(ctx, pvc); err != nil {
		return err
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: modes, Capacity: size}
	return c.Status().Update(ctx, pvc)
}

// claimCacheHeap starts a manager cache with opts informing on claims alone
// and returns the Go heap it takes once synced. It waits for the informers of
// an earlier call to stop before its first reading.
func claimCacheHeap(t *testing.T, ctx context.Context, opts crcache.Options) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	time.Sleep(3 * time.Second)
	runtime.GC()
	runtime.ReadMemStats(&before)
	opts.Scheme = shared.client.Scheme()
	cache, err := crcache.New(shared.env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cache.GetInformer(ctx, &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = cache.Start(cctx) }()
	if !cache.WaitForCacheSync(cctx) {
		t.Fatal("cache did not sync")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(cache)
	return max(after.HeapAlloc, before.HeapAlloc) - before.HeapAlloc
}
