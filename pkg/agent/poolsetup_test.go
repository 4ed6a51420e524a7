package agent

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/blockdev/blockdevfake"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/lvm/lvmfake"
)

const (
	hddByID  = "/dev/disk/by-id/ata-ST4000NM_ZC1"
	nvmeByID = "/dev/disk/by-id/nvme-Samsung_SSD_980_S1"
)

// recordedDevices is LVM's device list as the set-up last gave it.
type recordedDevices struct {
	mu   sync.Mutex
	last []string
}

func (r *recordedDevices) UseDevices(d []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = slices.Clone(d)
}

func (r *recordedDevices) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// setupWorld is a node with no disk plugged yet: the test plugs them.
type setupWorld struct {
	dev      *blockdevfake.Devices
	lvm      *lvmfake.LVM
	lvmDevs  *recordedDevices
	reg      *prometheus.Registry
	events   *events.FakeRecorder
	clk      *clocktesting.FakeClock
	cacheUp  []string
	setup    *PoolSetup
	watch    *PoolWatch
	recorded []string
}

func newSetupWorld(t *testing.T, origin, cache PoolSpec) *setupWorld {
	t.Helper()
	w := &setupWorld{dev: blockdevfake.New(), lvm: lvmfake.New(), lvmDevs: &recordedDevices{}, reg: prometheus.NewRegistry(),
		events: events.NewFakeRecorder(20), clk: clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	w.lvm.Resolve = func(d string) string { n, _ := w.dev.Resolve(d); return n }
	w.lvm.Record = func(e string) { w.recorded = append(w.recorded, e) }
	w.dev.Record = func(e string) { w.recorded = append(w.recorded, e) }
	m, err := NewMetrics(w.reg)
	if err != nil {
		t.Fatal(err)
	}
	origin.VG, origin.PoolDevices.VG = "ssdcache-hdd", "ssdcache-hdd"
	cache.VG, cache.PoolDevices.VG = "ssdcache-nvme", "ssdcache-nvme"
	w.watch = NewPoolWatch(w.lvm, "ssdcache-hdd", nil, m, PoolWatchOptions{Clock: w.clk})
	w.setup = NewPoolSetup(PoolSetupConfig{NodeName: node, Origin: origin, Cache: cache, DeviceClass: "nvme", Clock: w.clk},
		PoolSetupDeps{Inventory: w.dev, Pools: lvm.NewPools(w.lvm, w.dev), LVM: w.lvmDevs, Watch: w.watch, Metrics: m, Events: w.events,
			OnCacheUp: func(_ context.Context, class, vg string) error {
				w.cacheUp = append(w.cacheUp, class+"="+vg)
				return nil
			}})
	return w
}

func (w *setupWorld) plugHDD(sigs ...blockdev.Signature) {
	w.dev.Add(hddByID, blockdevfake.Device{Node: "/dev/sdb", Size: 4 << 40, Rotational: true, Model: "ST4000NM0035", Signatures: sigs})
	w.dev.Add("/dev/disk/by-id/wwn-0x5000c500a1", blockdevfake.Device{Node: "/dev/sdb", Size: 4 << 40, Rotational: true, Model: "ST4000NM0035", Signatures: sigs})
}

func (w *setupWorld) plugNVMe() {
	w.dev.Add(nvmeByID, blockdevfake.Device{Node: "/dev/nvme0n1", Size: 1 << 40, Model: "Samsung SSD 980"})
}

func (w *setupWorld) poolReady(t *testing.T, role string) float64 {
	t.Helper()
	families, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "ssdcache_node_pool_ready" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == role {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// nextEvent returns the next Event recorded, or "" when there is none.
func (w *setupWorld) nextEvent() string {
	select {
	case e := <-w.events.Events:
		return e
	default:
		return ""
	}
}

func selector(t *testing.T, s string) lvm.Selector {
	t.Helper()
	parsed, err := lvm.ParseSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// A node whose HDD is not there is not ready, says why (readiness, Event,
// metric) and touches nothing; once the disk is plugged, the next attempt
// sets the pool up and the node is ready, without a restart.
func TestPoolSetupWaitsForAMissingDisk(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "model=ST4000*,rotational=true")}}, PoolSpec{})
	w.setup.Attempt(context.Background())
	err := w.setup.Ready()
	if err == nil || !strings.Contains(err.Error(), `selector "model=ST4000*,rotational=true" matches no disk`) ||
		!strings.Contains(err.Error(), "retried every 30s") {
		t.Fatalf("Ready() = %v, want the selector that matched nothing and the retry", err)
	}
	if got := w.poolReady(t, PoolOrigin); got != 0 {
		t.Errorf("ssdcache_node_pool_ready{pool=origin} = %v, want 0", got)
	}
	if got := w.poolReady(t, PoolCache); got != -1 {
		t.Errorf("ssdcache_node_pool_ready{pool=cache} = %v on a node configured without cache, want no series", got)
	}
	if e := w.nextEvent(); !strings.HasPrefix(e, "Warning PoolNotReady") || !strings.Contains(e, "matches no disk") {
		t.Errorf("Event = %q, want Warning PoolNotReady with the reason", e)
	}
	if len(w.recorded) != 0 || len(w.lvmDevs.get()) != 0 {
		t.Fatalf("a node without its disk changed something (%v) or gave LVM devices (%v)", w.recorded, w.lvmDevs.get())
	}
	w.setup.Attempt(context.Background())
	if e := w.nextEvent(); e != "" {
		t.Errorf("an unchanged state was recorded again: %q", e)
	}

	w.plugHDD()
	w.setup.Attempt(context.Background())
	if err := w.setup.Ready(); err != nil {
		t.Fatalf("after the disk was plugged: %v", err)
	}
	if got := w.poolReady(t, PoolOrigin); got != 1 {
		t.Errorf("ssdcache_node_pool_ready{pool=origin} = %v, want 1", got)
	}
	// One link per disk, the one the selector saw first, both for LVM and the VG.
	if !slices.Equal(w.lvmDevs.get(), []string{hddByID}) {
		t.Errorf("LVM devices = %v, want [%s]", w.lvmDevs.get(), hddByID)
	}
	if e := w.nextEvent(); !strings.HasPrefix(e, "Normal PoolReady") || !strings.Contains(e, hddByID) {
		t.Errorf("Event = %q, want Normal PoolReady naming the device", e)
	}
}

// Safety rule 3 for selected disks: a disk the selector picks that carries
// a filesystem is refused and never written, the node says so, and a wipe
// by the operator lets the next attempt take it.
func TestPoolSetupRefusesASelectedDiskInUse(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "by-id=/dev/disk/by-id/ata-ST4000*")}}, PoolSpec{})
	w.plugHDD(blockdev.Signature{Type: "xfs", Offset: "0x0"})
	w.setup.Attempt(context.Background())
	err := w.setup.Ready()
	if err == nil || !strings.Contains(err.Error(), "carries a xfs signature") || !strings.Contains(err.Error(), hddByID) {
		t.Fatalf("Ready() = %v, want the refusal naming the disk", err)
	}
	if len(w.recorded) != 0 {
		t.Fatalf("a refused disk was written: %v", w.recorded)
	}
	if err := w.dev.Wipe(context.Background(), hddByID); err != nil {
		t.Fatal(err)
	}
	w.recorded = nil
	w.setup.Attempt(context.Background())
	if err := w.setup.Ready(); err != nil {
		t.Fatalf("after the operator wiped the disk: %v", err)
	}
}

// A cache pool that is missing leaves the node ready and uncached; the
// engine and the pool watch hear of the cache pool only once it is up.
func TestPoolSetupRunsUncachedUntilTheCacheDiskComes(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{hddByID}}},
		PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "rotational=false")}})
	w.plugHDD()
	w.setup.Attempt(context.Background())
	if err := w.setup.Ready(); err != nil {
		t.Fatalf("origin up, cache missing: %v", err)
	}
	if w.poolReady(t, PoolOrigin) != 1 || w.poolReady(t, PoolCache) != 0 || len(w.cacheUp) != 0 {
		t.Fatalf("pool_ready origin %v cache %v, engine told %v", w.poolReady(t, PoolOrigin), w.poolReady(t, PoolCache), w.cacheUp)
	}
	if p, _ := w.watch.CachePool(); p.Size != 0 {
		t.Fatalf("cache bytes %d before the cache pool is up", p.Size)
	}
	w.plugNVMe()
	w.setup.Attempt(context.Background())
	if w.poolReady(t, PoolCache) != 1 || !slices.Equal(w.cacheUp, []string{"nvme=ssdcache-nvme"}) {
		t.Fatalf("pool_ready cache %v, engine told %v", w.poolReady(t, PoolCache), w.cacheUp)
	}
	if p, _ := w.watch.CachePool(); p.Size == 0 {
		t.Fatal("the pool watch does not see the cache pool")
	}
	if got := w.lvmDevs.get(); !slices.Equal(got, []string{hddByID, nvmeByID}) {
		t.Fatalf("LVM devices = %v, want both pools' devices", got)
	}
}

// One disk selected for both pools fails both, naming the disk and the
// selectors; nothing is set up.
func TestPoolSetupRefusesOverlappingSelectors(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "min-size=100Gi")}},
		PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "by-id=/dev/disk/by-id/nvme-*")}})
	w.plugHDD()
	w.plugNVMe()
	w.setup.Attempt(context.Background())
	err := w.setup.Ready()
	if err == nil || !strings.Contains(err.Error(), "/dev/nvme0n1") || !strings.Contains(err.Error(), "one pool only") {
		t.Fatalf("Ready() = %v, want the overlap", err)
	}
	if len(w.recorded) != 0 || w.poolReady(t, PoolCache) != 0 {
		t.Fatalf("overlapping selectors set something up: %v", w.recorded)
	}
}

// A cache selector retried after the origin pool came up may not pick one
// of the origin's disks (here through a by-id link udev added late): the
// overlap is named, not left to LVM's refusal.
func TestPoolSetupCacheSelectorMustNotPickTheOriginsDisks(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{hddByID}}},
		PoolSpec{PoolDevices: lvm.PoolDevices{Selector: selector(t, "by-id=/dev/disk/by-id/wwn-*")}})
	hdd := blockdevfake.Device{Node: "/dev/sdb", Size: 4 << 40, Rotational: true}
	w.dev.Add(hddByID, hdd)
	w.setup.Attempt(context.Background())
	if err := w.setup.Ready(); err != nil {
		t.Fatalf("origin: %v", err)
	}
	w.dev.Add("/dev/disk/by-id/wwn-0x5000c500a1", hdd)
	w.setup.Attempt(context.Background())
	w.setup.mu.Lock()
	reason := w.setup.states[PoolCache].reason
	w.setup.mu.Unlock()
	if !strings.Contains(reason, "one pool only") || !strings.Contains(reason, "/dev/sdb") {
		t.Fatalf("cache pool reason = %q, want the overlap with the origin's disk", reason)
	}
	if w.poolReady(t, PoolCache) != 0 || len(w.cacheUp) != 0 {
		t.Fatal("the cache pool came up on an overlapping selector")
	}
	if err := w.setup.Ready(); err != nil {
		t.Fatalf("the origin pool, up, stopped being ready: %v", err)
	}
}

// Start retries on its interval and stops trying once every pool is up. It
// records the state of the attempt made before it again, whose Event the
// manager, not started yet, may have dropped.
func TestPoolSetupRetriesOnItsInterval(t *testing.T) {
	w := newSetupWorld(t, PoolSpec{PoolDevices: lvm.PoolDevices{Paths: []string{hddByID}}}, PoolSpec{})
	w.setup.Attempt(context.Background())
	if e := w.nextEvent(); !strings.HasPrefix(e, "Warning PoolNotReady") {
		t.Fatalf("first attempt's Event = %q", e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.setup.Start(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the state recorded again", func() bool { return strings.HasPrefix(w.nextEvent(), "Warning PoolNotReady") })
	if err := w.setup.Ready(); err == nil || !strings.Contains(err.Error(), hddByID) {
		t.Fatalf("Ready() = %v, want the missing device named", err)
	}
	w.plugHDD()
	waitFor(t, "a retry that finds the disk", func() bool {
		w.clk.Step(DefaultPoolRetryInterval)
		return w.setup.Ready() == nil
	})
	waitFor(t, "the PoolReady Event", func() bool { return strings.HasPrefix(w.nextEvent(), "Normal PoolReady") })
	before := len(w.recorded)
	for range 3 {
		w.clk.Step(DefaultPoolRetryInterval)
	}
	time.Sleep(50 * time.Millisecond)
	if e := w.nextEvent(); e != "" {
		t.Errorf("Event after the pools were up: %q", e)
	}
	if len(w.recorded) != before {
		t.Errorf("set-up kept changing pools once they were up: %v", w.recorded[before:])
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
