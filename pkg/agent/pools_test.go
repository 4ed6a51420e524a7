package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
)

// stuckLVM is an LVM whose reads hang until released, as on a node where
// another command holds the VG lock or a dying disk stalls the scan.
type stuckLVM struct {
	lvm.Interface
	entered chan struct{}
	release chan struct{}
}

func (s *stuckLVM) GetVG(ctx context.Context, name string) (lvm.VG, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
		return s.Interface.GetVG(ctx, name)
	case <-ctx.Done():
		return lvm.VG{}, ctx.Err()
	}
}

func poolWorld(t *testing.T) (*lvmfake.LVM, *clocktesting.FakeClock, *Metrics) {
	t.Helper()
	l := lvmfake.New()
	l.AddVG("ssdcache-hdd", 100<<30)
	l.AddVG("ssdcache-nvme", 10<<30)
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return l, clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0)), m
}

func TestPoolWatchReadyAfterAScanFindsTheOrigin(t *testing.T) {
	l, clk, m := poolWorld(t)
	w := NewPoolWatch(l, "ssdcache-hdd", []string{"ssdcache-nvme"}, m, PoolWatchOptions{Clock: clk})
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "not been read yet") {
		t.Fatalf("before any scan: Ready() = %v", err)
	}
	if err := w.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(); err != nil {
		t.Fatalf("after a scan: %v", err)
	}
	if got, err := w.CachePool(); err != nil || got.Size != 10<<30 || got.ExtentBytes != 4<<20 {
		t.Fatalf("CachePool() = %+v, %v; want 10 GiB of 4 MiB extents", got, err)
	}
	if v := testutil.ToFloat64(m.poolUp); v != 1 {
		t.Fatalf("cache_pool_up = %v, want 1", v)
	}
}

func TestPoolWatchNotReadyWithoutTheOrigin(t *testing.T) {
	l, clk, m := poolWorld(t)
	w := NewPoolWatch(l, "ssdcache-gone", []string{"ssdcache-nvme"}, m, PoolWatchOptions{Clock: clk})
	if err := w.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "origin volume group ssdcache-gone not found") {
		t.Fatalf("Ready() = %v, want the missing origin named", err)
	}
}

// The point of the watch: while LVM hangs, Ready answers at once from the
// last scan, and only says "not ready" once the evidence is stale, naming
// the scan in progress.
func TestPoolWatchAnswersWhileLVMHangs(t *testing.T) {
	l, clk, m := poolWorld(t)
	stuck := &stuckLVM{Interface: l, entered: make(chan struct{}, 4), release: make(chan struct{})}
	w := NewPoolWatch(stuck, "ssdcache-hdd", nil, m, PoolWatchOptions{Clock: clk, StaleAfter: 5 * time.Minute})
	close(stuck.release)
	if err := w.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-stuck.entered
	stuck.release = make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- w.Scan(context.Background()) }()
	<-stuck.entered

	clk.Step(time.Minute)
	if err := answerNow(t, w.Ready); err != nil {
		t.Fatalf("a minute into a hung scan, with a good scan before it: Ready() = %v", err)
	}
	clk.Step(5 * time.Minute)
	err := answerNow(t, w.Ready)
	if err == nil || !strings.Contains(err.Error(), "no successful LVM scan for 6m0s") || !strings.Contains(err.Error(), "a scan has been running for 6m0s") {
		t.Fatalf("six minutes into a hung scan: Ready() = %v", err)
	}
	close(stuck.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(); err != nil {
		t.Fatalf("after the scan finished: %v", err)
	}
}

func TestPoolWatchReportsTheLastFailure(t *testing.T) {
	l, clk, m := poolWorld(t)
	failing := &failingLVM{Interface: l, err: errors.New("lvm vgs: exit status 5")}
	w := NewPoolWatch(failing, "ssdcache-hdd", nil, m, PoolWatchOptions{Clock: clk})
	if err := w.Scan(context.Background()); err == nil {
		t.Fatal("a failed scan reported no error")
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "exit status 5") {
		t.Fatalf("Ready() = %v, want the last attempt's error", err)
	}
	if _, err := w.CachePool(); err == nil {
		t.Fatal("CachePool() without any successful scan returned no error")
	}
}

type failingLVM struct {
	lvm.Interface
	err error
}

func (f *failingLVM) GetVG(context.Context, string) (lvm.VG, error) { return lvm.VG{}, f.err }

// answerNow calls check and fails the test if it does not return promptly.
func answerNow(t *testing.T, check func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- check() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the readiness check waited for the hung LVM scan")
		return nil
	}
}

func TestPoolWatchSignalsTheFirstScan(t *testing.T) {
	l, clk, m := poolWorld(t)
	w := NewPoolWatch(l, "ssdcache-hdd", []string{"ssdcache-nvme"}, m, PoolWatchOptions{Clock: clk})
	select {
	case <-w.Scanned():
		t.Fatal("Scanned() closed before any scan")
	default:
	}
	for range 2 {
		if err := w.Scan(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.Scanned():
	default:
		t.Fatal("Scanned() still open after a successful scan")
	}
}

func TestPoolWatchExportsPoolSizesFromItsScan(t *testing.T) {
	l, clk, m := poolWorld(t)
	w := NewPoolWatch(l, "ssdcache-hdd", []string{"ssdcache-nvme", "ssdcache-sata"}, m,
		PoolWatchOptions{Clock: clk, Classes: map[string]string{"nvme": "ssdcache-nvme", "sata": "ssdcache-sata"}})
	if _, err := l.CreateLV(context.Background(), "ssdcache-nvme", "c1", 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		vec             *prometheus.GaugeVec
		pool, vg, class string
		want            float64
	}{
		{m.poolSize, "origin", "ssdcache-hdd", "", 100 << 30},
		{m.poolFree, "origin", "ssdcache-hdd", "", 100 << 30},
		{m.poolSize, "cache", "ssdcache-nvme", "nvme", 10 << 30},
		{m.poolFree, "cache", "ssdcache-nvme", "nvme", 9 << 30},
	} {
		if got := testutil.ToFloat64(c.vec.WithLabelValues(c.pool, c.vg, c.class)); got != c.want {
			t.Errorf("%s %s/%s: %v, want %v", c.pool, c.vg, c.class, got, c.want)
		}
	}
	// The sata VG does not exist: no series, rather than a pool of 0 bytes.
	if n := testutil.CollectAndCount(m.poolSize); n != 2 {
		t.Errorf("%d pool size series, want 2 (the missing VG has none)", n)
	}
	l.AddVG("ssdcache-sata", 5<<30)
	if err := w.Scan(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.poolSize.WithLabelValues("cache", "ssdcache-sata", "sata")); got != 5<<30 {
		t.Errorf("sata pool after it appeared: %v", got)
	}
}
