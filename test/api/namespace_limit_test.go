package api

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// The burst of TestNamespaceLimitUnderBurst: more bindings than the limit holds,
// created at once.
const (
	burstBindings = 20
	burstLimit    = 5 << 30 // five of the 1Gi bindings
)

// TestNamespaceLimitUnderBurst (issue 37): many bindings created at once in one
// namespace, in no particular order, while the controller admits them one after
// the other faster than its cache shows its own status writes. Every state the
// API server goes through (each binding write seen on a watch) must keep the
// namespace's admitted bytes within its limit, also when admitted bindings go away
// and the waiting ones are admitted in their place.
func TestNamespaceLimitUnderBurst(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	setAnnotation(t, ctx, c, &corev1.Namespace{}, ns, ssdv1.AnnotationNamespaceCacheLimit, fmt.Sprint(burstLimit))
	node := createNode(t, ctx, c, "1000000000000")
	for i := range burstBindings {
		createVolume(t, ctx, c, ns, volume{pvc: burstName(i), node: node, size: "10Gi"})
	}
	seen := watchAdmitted(t, ctx, ns)

	var g errgroup.Group
	for i := range burstBindings {
		g.Go(func() error {
			b := &ssdv1.CacheBinding{ObjectMeta: metav1.ObjectMeta{Name: burstName(i), Namespace: ns},
				Spec: ssdv1.CacheBindingSpec{PVCName: burstName(i), Size: "1Gi"}}
			return c.Create(ctx, b)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	admitted := waitNamespaceSettled(t, c, ns)
	seen.check(t)

	// Two admitted bindings go away (their agent detaches and releases them): two of
	// the waiting ones take their place, all woken at once.
	for _, name := range admitted[:2] {
		b, err := getBinding(ctx, c, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		removeFinalizer(t, ctx, c, b, ssdv1.Finalizer)
		waitGone(t, c, b)
	}
	again := waitNamespaceSettled(t, c, ns)
	if slices.Contains(again, admitted[0]) || slices.Contains(again, admitted[1]) {
		t.Errorf("admitted after the deletions: %v, which names a deleted binding", again)
	}
	seen.check(t)
}

func burstName(i int) string { return fmt.Sprintf("v%02d", i) }

// waitNamespaceSettled waits until the limit is filled and every other binding of
// ns waits for it, checking the limit at every poll, and returns the admitted ones.
func waitNamespaceSettled(t *testing.T, c client.Client, ns string) []string {
	t.Helper()
	var admitted []string
	eventually(t, "namespace limit filled, the others NamespaceCacheLimit", func(ctx context.Context) error {
		list := &ssdv1.CacheBindingList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		admitted = nil
		var sum int64
		var waiting int
		for _, b := range list.Items {
			p := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending)
			switch {
			case b.Status.NodeName != "":
				admitted = append(admitted, b.Name)
				sum += b.Status.ResolvedSizeBytes
			case p != nil && p.Status == metav1.ConditionTrue && p.Reason == ssdv1.ReasonNamespaceCacheLimit:
				waiting++
			}
		}
		if sum > burstLimit {
			t.Errorf("bindings admitted in %s take %d bytes, more than its limit of %d: %v", ns, sum, burstLimit, admitted)
		}
		if sum != burstLimit || len(admitted)+waiting != len(list.Items) {
			return fmt.Errorf("%d bytes admitted (%v), %d of %d waiting for the limit", sum, admitted, waiting, len(list.Items)-len(admitted))
		}
		return nil
	})
	return admitted
}

// admissionWatch follows every write to the bindings of a namespace and keeps the
// most bytes they had admitted at once.
type admissionWatch struct {
	mu       sync.Mutex
	admitted map[string]int64 // bytes by binding, as of its last write
	most     int64
	mostAt   []string // the bindings admitted when most was reached
	err      error    // the watch's own failure
}

// watchAdmitted starts following ns's bindings; the watch stops with the test.
func watchAdmitted(t *testing.T, ctx context.Context, ns string) *admissionWatch {
	t.Helper()
	wc, err := client.NewWithWatch(shared.env.Config, client.Options{Scheme: shared.client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &ssdv1.CacheBindingList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	a := &admissionWatch{admitted: map[string]int64{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			a.record(ev)
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
	return a
}

func (a *admissionWatch) record(ev watch.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := ev.Object.(*ssdv1.CacheBinding)
	switch {
	case ev.Type == watch.Error || !ok:
		a.err = fmt.Errorf("watch event %s: %v", ev.Type, ev.Object)
		return
	case ev.Type == watch.Deleted || b.Status.NodeName == "":
		delete(a.admitted, b.Name)
	default:
		a.admitted[b.Name] = b.Status.ResolvedSizeBytes
	}
	var sum int64
	for _, n := range a.admitted {
		sum += n
	}
	if sum > a.most {
		a.most = sum
		a.mostAt = slices.Sorted(maps.Keys(a.admitted))
	}
}

// check fails the test when the namespace ever had more than its limit admitted.
func (a *admissionWatch) check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.most > burstLimit {
		t.Errorf("the namespace had %d bytes admitted at once, more than its limit of %d: %v", a.most, burstLimit, a.mostAt)
	}
}
