package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// Pool scans: the volume groups are read every 30 s. A scan that takes
// longer than five minutes is abandoned, and readiness turns false once no
// scan has succeeded for five minutes: a busy node (a long lvcreate holding
// the VG lock, heavy I/O) can take tens of seconds for one `lvm vgs`.
const (
	DefaultPoolScanInterval = 30 * time.Second
	DefaultPoolStaleAfter   = 5 * time.Minute
)

// PoolWatch reads the node's volume groups in the background and remembers
// what it saw. Readiness, the CSI Probe and the capacity report read that
// memory, so no probe ever starts, waits for or kills an LVM command: a probe
// deadline that killed LVM under load used to fail the liveness probe and
// restart the plugin in the middle of its own lvremove.
type PoolWatch struct {
	lvm        lvm.Interface
	originVG   string
	cacheVGs   []string
	classes    map[string]string // cache VG -> device class, for the pool metrics
	metrics    *Metrics
	clock      clock.WithTicker
	interval   time.Duration
	staleAfter time.Duration

	mu sync.Mutex
	// ok is the last scan that read every pool; zero until one has.
	ok poolScan
	// lastErr is why the latest scan failed; nil after a successful one.
	lastErr error
	// scanningSince is when the scan in progress started; zero when idle.
	scanningSince time.Time
	// firstScan is closed by the first successful scan.
	firstScan chan struct{}
}

// poolScan is what one successful scan found.
type poolScan struct {
	at     time.Time
	origin *lvm.VG
	caches []lvm.VG
}

// PoolWatchOptions configure a PoolWatch; zero values take the defaults.
type PoolWatchOptions struct {
	Interval, StaleAfter time.Duration
	Clock                clock.WithTicker
	// Classes are the cache pools' device classes, class -> VG as in
	// cache.Pools.CacheVGs; they label the pool size metrics.
	Classes map[string]string
}

// NewPoolWatch watches originVG and cacheVGs (the cache pools that came up).
func NewPoolWatch(l lvm.Interface, originVG string, cacheVGs []string, m *Metrics, o PoolWatchOptions) *PoolWatch {
	w := &PoolWatch{lvm: l, originVG: originVG, cacheVGs: cacheVGs, metrics: m, clock: o.Clock,
		interval: o.Interval, staleAfter: o.StaleAfter, firstScan: make(chan struct{}), classes: map[string]string{}}
	for class, vg := range o.Classes {
		w.classes[vg] = class
	}
	if w.clock == nil {
		w.clock = clock.RealClock{}
	}
	if w.interval <= 0 {
		w.interval = DefaultPoolScanInterval
	}
	if w.staleAfter <= 0 {
		w.staleAfter = DefaultPoolStaleAfter
	}
	return w
}

// SetCacheVGs replaces the cache pools watched: the node's pool set-up adds
// one once its devices are usable. Only pools that set-up brought up are
// watched, so a foreign VG of the same name is never reported as capacity.
func (w *PoolWatch) SetCacheVGs(vgs []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cacheVGs = slices.Clone(vgs)
}

// Start scans every interval, counted from the start of each scan, until
// ctx ends; it is a controller-runtime Runnable. It paces with real time:
// tests call Scan with their clock.
func (w *PoolWatch) Start(ctx context.Context) error {
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if err := w.Scan(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Reading the volume groups")
		}
	}, w.interval)
	return nil
}

// Scan reads every pool once, under its own deadline (never a caller's
// probe deadline), and records the outcome.
func (w *PoolWatch) Scan(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.staleAfter)
	defer cancel()
	w.mu.Lock()
	w.scanningSince = w.clock.Now()
	w.mu.Unlock()
	scan, err := w.read(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scanningSince = time.Time{}
	w.lastErr = err
	if err == nil {
		if w.ok.at.IsZero() {
			close(w.firstScan)
		}
		w.ok = scan
		if w.metrics != nil {
			w.metrics.SetPoolUp(len(scan.caches) > 0)
			w.metrics.SetPools(w.poolBytes(scan))
		}
	}
	return err
}

func (w *PoolWatch) read(ctx context.Context) (poolScan, error) {
	scan := poolScan{}
	get := func(name string) (*lvm.VG, error) {
		vg, err := w.lvm.GetVG(ctx, name)
		if errors.Is(err, lvm.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("volume group %s: %w", name, err)
		}
		return &vg, nil
	}
	var err error
	if scan.origin, err = get(w.originVG); err != nil {
		return scan, err
	}
	w.mu.Lock()
	cacheVGs := w.cacheVGs
	w.mu.Unlock()
	for _, name := range cacheVGs {
		vg, err := get(name)
		if err != nil {
			return scan, err
		}
		if vg != nil {
			scan.caches = append(scan.caches, *vg)
		}
	}
	scan.at = w.clock.Now()
	return scan, nil
}

// poolBytes lists every configured volume group with what scan found of it:
// the pool metrics come from the scan readiness needs anyway, so they cost
// no LVM command of their own.
func (w *PoolWatch) poolBytes(scan poolScan) []PoolBytes {
	origin := PoolBytes{Pool: "origin", VG: w.originVG}
	if scan.origin != nil {
		origin.Found, origin.Size, origin.Free = true, scan.origin.Size, scan.origin.Free
	}
	out := []PoolBytes{origin}
	for _, name := range w.cacheVGs {
		p := PoolBytes{Pool: "cache", VG: name, Class: w.classes[name]}
		for _, vg := range scan.caches {
			if vg.Name == name {
				p.Found, p.Size, p.Free = true, vg.Size, vg.Free
			}
		}
		out = append(out, p)
	}
	return out
}

// Ready reports, from memory, whether the node can serve volumes: the last
// successful scan found the origin pool and is recent. The error says what
// is wrong and how old the evidence is.
func (w *PoolWatch) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	if w.ok.at.IsZero() {
		return fmt.Errorf("the volume groups have not been read yet%s", w.progress(now))
	}
	if age := now.Sub(w.ok.at); age > w.staleAfter {
		return fmt.Errorf("no successful LVM scan for %v (limit %v)%s", age.Round(time.Second), w.staleAfter, w.progress(now))
	}
	if w.ok.origin == nil {
		return fmt.Errorf("origin volume group %s not found by the LVM scan %v ago", w.originVG, now.Sub(w.ok.at).Round(time.Second))
	}
	return nil
}

// progress describes the scan in progress and the last failure, for errors.
func (w *PoolWatch) progress(now time.Time) string {
	s := ""
	if !w.scanningSince.IsZero() {
		s += fmt.Sprintf("; a scan has been running for %v", now.Sub(w.scanningSince).Round(time.Second))
	}
	if w.lastErr != nil {
		s += fmt.Sprintf("; last attempt: %v", w.lastErr)
	}
	return s
}

// Scanned is closed once a scan has succeeded, for readers that have nothing
// to say before (the capacity report).
func (w *PoolWatch) Scanned() <-chan struct{} { return w.firstScan }

// CachePool is what a scan read of the cache pools, together.
type CachePool struct {
	// Size and Free are their bytes, and those not allocated to any LV.
	Size, Free uint64
	// ExtentBytes is their largest extent size, the unit lvcreate rounds
	// every LV up to (0 without a pool).
	ExtentBytes uint64
}

// CachePool is the cache pools at the last successful scan.
func (w *PoolWatch) CachePool() (CachePool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ok.at.IsZero() {
		return CachePool{}, errors.New("the cache volume groups have not been read yet")
	}
	var p CachePool
	for _, vg := range w.ok.caches {
		p.Size += vg.Size
		p.Free += vg.Free
		p.ExtentBytes = max(p.ExtentBytes, vg.ExtentSize)
	}
	return p, nil
}

// MissingPVs is how many PVs of cache pool vg LVM did not find at the last
// successful scan: the pool set-up removes them (PoolSetup.RepairCache)
// without an LVM command of its own while there are none.
func (w *PoolWatch) MissingPVs(vg string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.ok.caches {
		if g.Name == vg {
			return g.MissingPVs
		}
	}
	return 0
}

// CacheVGLost reports whether the last successful scan did not find cache
// pool vg, which the pool set-up brought up: LVM no longer finds a VG
// whose only device died. Before any scan it reports false.
func (w *PoolWatch) CacheVGLost(vg string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ok.at.IsZero() || !slices.Contains(w.cacheVGs, vg) {
		return false
	}
	return !slices.ContainsFunc(w.ok.caches, func(g lvm.VG) bool { return g.Name == vg })
}
