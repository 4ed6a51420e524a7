package api

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// Scale of TestScaleAdmission: bindings spread evenly over nodes.
const (
	scaleNodes    = 100
	scaleBindings = 1000
	// scaleSteady is how long status writes are counted once all are admitted.
	scaleSteady = time.Minute
)

// TestScaleAdmission is a benchmark, not a pass/fail test of timings: 1,000
// CacheBindings over 100 nodes on the real API server, created at once. It
// reports the controller's admission latency (create to Pending=False,
// p50/p99) and the status writes per binding per minute once all are
// admitted. Run it with `make bench-api`.
func TestScaleAdmission(t *testing.T) {
	if os.Getenv("SSDCACHE_API_SCALE") == "" {
		t.Skip("a benchmark: set SSDCACHE_API_SCALE=1 (make bench-api)")
	}
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	nodes := make([]string, scaleNodes)
	for i := range nodes {
		nodes[i] = createNode(t, ctx, c, "1000000000000")
	}
	for i := range scaleBindings {
		createVolume(t, ctx, c, ns, volume{pvc: fmt.Sprintf("v%04d", i), node: nodes[i%scaleNodes], size: "10Gi"})
	}
	wc, err := client.NewWithWatch(shared.env.Config, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &ssdv1.CacheBindingList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, admitted := createAll(t, ctx, c, ns), map[string]time.Time{}
	deadline := time.After(10 * time.Minute)
	for len(admitted) < scaleBindings {
		select {
		case ev := <-w.ResultChan():
			if b, ok := ev.Object.(*ssdv1.CacheBinding); ok && isAdmitted(b) && admitted[b.Name].IsZero() {
				admitted[b.Name] = time.Now()
			}
		case <-deadline:
			t.Fatalf("%d of %d bindings admitted after 10 minutes", len(admitted), scaleBindings)
		}
	}
	latencies := make([]time.Duration, 0, scaleBindings)
	for name, at := range admitted {
		latencies = append(latencies, at.Sub(created.at(name)))
	}
	slices.Sort(latencies)
	writes := countWrites(w, scaleSteady)
	t.Logf("%d bindings over %d nodes: admission latency p50 %s, p99 %s, last %s; at steady state %.2f status writes per binding per minute",
		scaleBindings, scaleNodes, latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)*99/100].Round(time.Millisecond),
		latencies[len(latencies)-1].Round(time.Millisecond), float64(writes)/scaleBindings/scaleSteady.Minutes())
}

func isAdmitted(b *ssdv1.CacheBinding) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending)
	return c != nil && c.Status == metav1.ConditionFalse && b.Status.NodeName != ""
}

// creationTimes records when each binding's create returned.
type creationTimes struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (c *creationTimes) at(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

// createAll creates the bindings from 16 clients at once.
func createAll(t *testing.T, ctx context.Context, c client.Client, ns string) *creationTimes {
	t.Helper()
	times := &creationTimes{m: map[string]time.Time{}}
	var g errgroup.Group
	g.SetLimit(16)
	for i := range scaleBindings {
		g.Go(func() error {
			name := fmt.Sprintf("v%04d", i)
			b := &ssdv1.CacheBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: ssdv1.CacheBindingSpec{PVCName: name, Size: "1Gi"}}
			if err := c.Create(ctx, b); err != nil {
				return err
			}
			times.mu.Lock()
			times.m[name] = time.Now()
			times.mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return times
}

// countWrites counts the binding updates seen during d.
func countWrites(w watch.Interface, d time.Duration) int {
	n := 0
	end := time.After(d)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				n++
			}
		case <-end:
			return n
		}
	}
}
