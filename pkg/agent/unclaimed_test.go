package agent

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// selectedCache is the agent's cached client under CacheOptions: it holds
// only the bindings labelled with the node.
type selectedCache struct {
	client.Client
	lists int
}

func (s *selectedCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := s.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if b, ok := obj.(*ssdv1.CacheBinding); ok && b.Labels[ssdv1.LabelNode] != node {
		return apierrors.NewNotFound(schema.GroupResource{Group: ssdv1.GroupVersion.Group, Resource: "cachebindings"}, key.Name)
	}
	return nil
}

func (s *selectedCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	if bl, ok := list.(*ssdv1.CacheBindingList); ok {
		s.lists++
		kept := bl.Items[:0]
		for _, b := range bl.Items {
			if b.Labels[ssdv1.LabelNode] == node {
				kept = append(kept, b)
			}
		}
		bl.Items = kept
	}
	return nil
}

// TestSweepKeepsTheCacheOfAnUnlabelledBinding: a binding admitted here by an
// older controller carries no node label, so the agent's cache does not hold
// it; its cache is confirmed with the API server before any detach, and kept.
// Once the API server shows it revoked, the cache goes.
func TestSweepKeepsTheCacheOfAnUnlabelledBinding(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	binding := admitted(ssdv1.ModeReadCache, gib)
	binding.UID = "uid-1"
	r, c, _ := n.reconciler(t, binding)
	reconcileOnce(t, r)
	sel := &selectedCache{Client: c}
	r = NewBindingReconciler(sel, events.NewFakeRecorder(10), n.engine, n.locks, n.samples, node, BindingOptions{Clock: n.clock, APIReader: c})
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.tableType(t); got != "cache" {
		t.Fatalf("the cache of a binding admitted here but not labelled was detached: table %s", got)
	}
	revoke(t, c)
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := n.tableType(t); got != "linear" {
		t.Fatalf("the cache of a revoked binding was kept: table %s", got)
	}
}

// TestSweepReadsTheBindingsOncePerSweep: the 30 s sweep used to list (and
// copy) every binding of the cluster once per staged volume; it reads them
// once, whatever the number of volumes.
func TestSweepReadsTheBindingsOncePerSweep(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	var objs []client.Object
	for i, id := range []string{vol, "vol-2", "vol-3"} {
		if id != vol {
			stageAnother(t, n, id)
		}
		b := admitted(ssdv1.ModeReadCache, gib)
		b.Name, b.Status.VolumeHandle = fmt.Sprintf("b%d", i), id
		b.Labels = map[string]string{ssdv1.LabelNode: node}
		objs = append(objs, b)
	}
	_, c, _ := n.reconciler(t, objs...)
	sel := &selectedCache{Client: c}
	r := NewBindingReconciler(sel, events.NewFakeRecorder(10), n.engine, n.locks, n.samples, node, BindingOptions{Clock: n.clock, APIReader: c})
	if err := r.DetachUnclaimed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sel.lists != 1 {
		t.Errorf("one sweep over 3 staged volumes listed the bindings %d times, want once", sel.lists)
	}
}

// stageAnother stages one more volume of id on the node.
func stageAnother(t *testing.T, n *fakeNode, id string) {
	t.Helper()
	if _, err := n.lvm.CreateLV(context.Background(), "hdd", id, gib, lvm.Tags(id, lvm.RoleOrigin)); err != nil {
		t.Fatal(err)
	}
	origin, err := n.engine.OriginLV(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.engine.Stage(context.Background(), cache.StageSpec{VolumeID: id, Origin: origin}); err != nil {
		t.Fatal(err)
	}
}

// TestSweepRemovesTheKeptCacheOfARevokedUnstagedVolume: a clean unstage
// keeps the cache LVs for the next stage; they hold the node's SSD only
// while a binding here claims them. The sweep keeps them for the admitted
// binding and removes them once it is revoked.
func TestSweepRemovesTheKeptCacheOfARevokedUnstagedVolume(t *testing.T) {
	n := newNode(t)
	n.stage(t, nil)
	r, c, _ := n.reconciler(t, admitted(ssdv1.ModeReadCache, gib))
	reconcileOnce(t, r)
	if err := n.engine.Unstage(context.Background(), vol); err != nil {
		t.Fatal(err)
	}
	kept := func() bool {
		t.Helper()
		_, ok, err := n.engine.KeptCache(context.Background(), vol)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := r.DetachUnclaimed(context.Background()); err != nil || !kept() {
		t.Fatalf("the sweep removed the kept cache of an admitted binding (%v)", err)
	}
	revoke(t, c)
	if err := r.DetachUnclaimed(context.Background()); err != nil || kept() {
		t.Fatalf("the kept cache of a revoked binding outlived the sweep (%v)", err)
	}
}
