package cache

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/dm/dmfake"
)

// heldSuspends is a device-mapper whose suspends wait for the I/O in flight
// on a cache device that never completes it: they return only once their
// context ends, as the kernel's interruptible wait does when signalled.
// deadlines records how far each suspend's context reached.
type heldSuspends struct {
	*dmfake.DM
	mu        sync.Mutex
	deadlines []time.Duration
	// started gets one value per suspend, once its deadline is recorded.
	started chan struct{}
}

func holdSuspends(d *dmfake.DM) *heldSuspends {
	return &heldSuspends{DM: d, started: make(chan struct{}, 16)}
}

func (h *heldSuspends) wait(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	h.mu.Lock()
	if ok {
		h.deadlines = append(h.deadlines, time.Until(dl))
	} else {
		h.deadlines = append(h.deadlines, -1)
	}
	h.mu.Unlock()
	h.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func (h *heldSuspends) deadlinesSeen() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.deadlines...)
}

func (h *heldSuspends) Suspend(ctx context.Context, name string) error { return h.wait(ctx) }

func (h *heldSuspends) SuspendNoFlush(ctx context.Context, name string) error { return h.wait(ctx) }

// A drop of a cache whose I/O never completes gives up after
// DropSuspendTimeout with ErrCacheNotAnswering (the monitor tries again at
// a later tick), its suspend skipping the filesystem freeze, and leaves the
// cache live and resumed: it never holds its caller for ever (issue 37
// point 2).
func TestDropOfAHungCacheGivesUp(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	held := holdSuspends(w.dm)
	w.engine = NewEngine(Layers{DM: held, LVM: w.lvm, Dev: w.dev, Metadata: w.meta, HotSets: w.hotSets, Reads: w.reads}, testPools, nil, w.engineOpts...)
	before := w.table(t)
	done := make(chan error, 1)
	go func() { done <- w.engine.DropCache(context.Background(), vol, before) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(DropSuspendTimeout + 30*time.Second):
		t.Fatal("the drop of a hung cache did not return")
	}
	if !errors.Is(err, ErrCacheNotAnswering) {
		t.Fatalf("err = %v, want ErrCacheNotAnswering", err)
	}
	if got := held.deadlinesSeen(); len(got) != 1 || got[0] <= 0 || got[0] > DropSuspendTimeout {
		t.Fatalf("suspend deadlines %v, want one within %s", got, DropSuspendTimeout)
	}
	if w.dm.Suspended(DeviceName(vol)) || w.dm.HasInactive(DeviceName(vol)) || !w.table(t).Equal(before) {
		t.Fatalf("after the drop gave up: table %q suspended=%v, want %q live", w.table(t), w.dm.Suspended(DeviceName(vol)), before)
	}
}

// A drop suspends without flush or freeze (a frozen filesystem writes
// through the failing SSD); every other reload keeps dmsetup's default.
func TestDropSuspendsWithoutFlush(t *testing.T) {
	w := newWorld(t)
	w.stage(t, readCache(gib))
	w.dm.Calls = nil
	if err := w.engine.DropCache(context.Background(), vol, w.table(t)); err != nil {
		t.Fatal(err)
	}
	if indexOf(w.dm.Calls, "suspend-noflush "+DeviceName(vol)) < 0 || indexOf(w.dm.Calls, "suspend "+DeviceName(vol)) >= 0 {
		t.Fatalf("drop's calls %v, want suspend-noflush only", w.dm.Calls)
	}
}

// Every reload's suspend has a deadline (a hand-over, a promotion, an
// attach): one waiting on a hung cache's I/O gives up after SuspendTimeout.
func TestReloadSuspendHasADeadline(t *testing.T) {
	w := newWorld(t)
	w.stage(t, nil)
	held := holdSuspends(w.dm)
	w.engine = NewEngine(Layers{DM: held, LVM: w.lvm, Dev: w.dev, Metadata: w.meta, HotSets: w.hotSets, Reads: w.reads}, testPools, nil, w.engineOpts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.engine.Attach(ctx, vol, *readCache(gib)) }()
	select {
	case <-held.started:
	case err := <-done:
		t.Fatalf("attach returned %v before it suspended", err)
	}
	cancel() // the test does not wait SuspendTimeout
	<-done
	got := held.deadlinesSeen()
	if len(got) != 1 || got[0] <= 0 || got[0] > SuspendTimeout {
		t.Fatalf("suspend deadlines %v, want one within %s", got, SuspendTimeout)
	}
}
