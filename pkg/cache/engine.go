package cache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/fileblocks"
	"github.com/ssdcache/ssdcache/pkg/hotset"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/readtrack"
)

// zeroMetadataBytes covers dm-cache's superblock with room to spare: a zero
// superblock makes dm-cache format fresh, empty metadata.
const zeroMetadataBytes = 1 << 20

// Pools names the node's volume groups.
type Pools struct {
	// OriginVG holds origin volumes on HDDs.
	OriginVG string
	// CacheVGs maps a device class to the VG of its cache devices.
	CacheVGs map[string]string
	// DefaultClass is used when a spec names no class.
	DefaultClass string
}

// HasCacheVG says whether vg is the cache VG of some class.
func (p Pools) HasCacheVG(vg string) bool {
	return slices.Contains(slices.Collect(maps.Values(p.CacheVGs)), vg)
}

// CacheVG returns the VG of class ("" for the default class).
func (p Pools) CacheVG(class string) (string, error) {
	if class == "" {
		class = p.DefaultClass
	}
	vg, ok := p.CacheVGs[class]
	if !ok {
		classes := make([]string, 0, len(p.CacheVGs))
		for c := range p.CacheVGs {
			classes = append(classes, c)
		}
		slices.Sort(classes)
		return "", fmt.Errorf("device class %q: this node has %v: %w", class, classes, ErrUnknownClass)
	}
	return vg, nil
}

// Layers are the OS layers the engine works through.
type Layers struct {
	DM  dm.Interface
	LVM lvm.Interface
	Dev blockdev.Interface
	// Metadata and HotSets, both set, keep each volume's hot set when its
	// cache goes and fill a new cache from it (warm.go); either nil turns
	// that off.
	Metadata dm.MetadataTools
	HotSets  hotset.Store
	// Files maps named paths of a volume's filesystem to its blocks for
	// Preload; nil turns preloading off.
	Files fileblocks.Mapper
	// Reads records the blocks each cache missed, for Promote; nil (or
	// no Metadata) leaves promotion to dm-cache's smq.
	Reads readtrack.Interface
}

// Engine attaches, detaches, resizes and pauses caches of staged volumes.
// It is safe for concurrent use on different volumes; callers serialise work
// on one volume with VolumeLocks.
type Engine struct {
	dm       dm.Interface
	lvm      lvm.Interface
	dev      blockdev.Interface
	metadata dm.MetadataTools
	hotSets  hotset.Store
	files    fileblocks.Mapper
	reads    readtrack.Interface
	faults   FaultPoints
	// minBlockSectors is the block size of new caches, before doubling for
	// large ones (cachesize.BlockSectorsFor).
	minBlockSectors uint64
	// promoted says an agent promotes the blocks read (WithPromoter).
	promoted bool
	// trackedAreas bounds the areas of the dm-stats region counting writes
	// during a copy, and so its kernel memory (WithPossibleCPUs).
	trackedAreas uint64
	// layouts are the blocks each live cache maps, as far as this
	// process loaded them.
	layouts *layouts
	// bootID tells a reboot from a restart of the plugin (WithBootID).
	bootID string

	poolsMu sync.RWMutex
	pools   Pools
}

// Option changes an engine's defaults.
type Option func(*Engine)

// WithBlockSectors makes new caches use blocks of at least sectors (a valid
// dm-cache block size, cachesize.ValidateBlockSectors) instead of
// cachesize.DefaultBlockSectors. Caches already made keep theirs until they are
// made again (resize, or attach after a detach).
func WithBlockSectors(sectors uint64) Option {
	return func(e *Engine) { e.minBlockSectors = sectors }
}

// BlockSectors is the block size of new caches before doubling: the node
// reports it so that admission charges each cache the metadata LV it gets
// (cachesize.Footprint).
func (e *Engine) BlockSectors() uint64 { return e.minBlockSectors }

// WithPromoter says that an agent promotes the blocks read on caches that
// warm up (agent.Promoter calls Promote and HandOver): their tables start
// on PolicyFilling. Without it every cache runs PolicyReplacing.
func WithPromoter() Option {
	return func(e *Engine) { e.promoted = true }
}

// WithPossibleCPUs sizes the dm-stats regions that count writes during a
// copy for a node with cpus possible CPUs (dm.TrackedAreasFor), whose
// kernel keeps per-CPU counters for every area. Without it regions have up
// to dm.MaxTrackedAreas areas.
func WithPossibleCPUs(cpus int) Option {
	return func(e *Engine) { e.trackedAreas = dm.TrackedAreasFor(cpus) }
}

// NewEngine returns an engine over the given OS layers.
func NewEngine(l Layers, pools Pools, faults FaultPoints, opts ...Option) *Engine {
	if faults == nil {
		faults = NoFaults{}
	}
	pools.CacheVGs = maps.Clone(pools.CacheVGs) // AddCachePool changes the engine's own
	e := &Engine{dm: l.DM, lvm: l.LVM, dev: l.Dev, files: l.Files, reads: l.Reads, pools: pools, faults: faults, minBlockSectors: cachesize.DefaultBlockSectors, trackedAreas: dm.MaxTrackedAreas, layouts: newLayouts()}
	if l.Metadata != nil && l.HotSets != nil {
		e.metadata, e.hotSets = l.Metadata, l.HotSets
	}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Pools returns the engine's pool configuration.
func (e *Engine) Pools() Pools {
	e.poolsMu.RLock()
	defer e.poolsMu.RUnlock()
	p := e.pools
	p.CacheVGs = maps.Clone(p.CacheVGs)
	return p
}

// AddCachePool makes vg the cache pool of class: the node plugin sets up a
// cache pool whose devices were missing or refused at start once they are
// usable, without a restart. The first time it sees vg it deletes the
// shutdown marks a plugin of this boot left on its LVs, before anything
// can work on them (shutdown.go).
func (e *Engine) AddCachePool(ctx context.Context, class, vg string) error {
	if !e.Pools().HasCacheVG(vg) {
		if err := e.ForgetShutdownMarks(ctx, vg); err != nil {
			return err
		}
	}
	e.poolsMu.Lock()
	defer e.poolsMu.Unlock()
	if e.pools.CacheVGs == nil {
		e.pools.CacheVGs = map[string]string{}
	}
	e.pools.CacheVGs[class] = vg
	return nil
}

// observe reads the kernel's table and the volume's cache LVs.
func (e *Engine) observe(ctx context.Context, volumeID string) (observed, error) {
	var obs observed
	table, err := e.dm.Table(ctx, DeviceName(volumeID))
	switch {
	case errors.Is(err, dm.ErrNotFound):
	case err != nil:
		return obs, err
	default:
		obs.staged, obs.table = true, table
		obs.uncachedWrites = e.uncachedWrites(ctx, volumeID, table)
	}
	for _, vg := range e.cacheVGs() {
		lvs, err := lvm.VolumeLVs(ctx, e.lvm, vg, volumeID)
		if err != nil {
			return obs, fmt.Errorf("list cache LVs of %s in %s: %w", volumeID, vg, err)
		}
		for _, lv := range lvs {
			if r := lv.Role(); r == lvm.RoleCacheMetadata || r == lvm.RoleCacheData {
				obs.cacheLVs = append(obs.cacheLVs, lv)
			}
		}
	}
	return obs, nil
}

// uncachedWrites is the region counting the writes through a linear
// table since its cache was taken out, if there is one. One that cannot be
// read counts as none: the kept cache is then refilled as after a reboot.
func (e *Engine) uncachedWrites(ctx context.Context, volumeID string, table dm.Table) *dm.WriteRegion {
	if _, linear := table.Target.(dm.LinearTarget); !linear {
		return nil
	}
	r, ok, err := e.dm.UncachedWrites(ctx, DeviceName(volumeID))
	if err != nil {
		klog.InfoS("Could not read which writes the volume saw while uncached; a kept cache is refilled", "volumeID", volumeID, "err", err)
	}
	if err != nil || !ok {
		return nil
	}
	return &r
}

func (e *Engine) cacheVGs() []string {
	pools := e.Pools()
	vgs := make([]string, 0, len(pools.CacheVGs))
	for _, vg := range pools.CacheVGs {
		if !slices.Contains(vgs, vg) {
			vgs = append(vgs, vg)
		}
	}
	slices.Sort(vgs)
	return vgs
}

// Result is what a change of a volume's cache did.
type Result struct {
	// Changed is false when the volume already had the cache asked for.
	Changed bool
	// Warmed reports the filling of a new cache from the volume's hot set;
	// zero when there was none.
	Warmed WarmReport
}

// converge plans and applies the steps from what is to want.
func (e *Engine) converge(ctx context.Context, volumeID, op string, obs observed, want desired) (Result, error) {
	steps := plan(obs, want)
	if len(steps) == 0 {
		return Result{}, nil
	}
	klog.InfoS("Changing volume", "volumeID", volumeID, "operation", op, "steps", steps)
	start := time.Now()
	run := &applier{Engine: e, op: op, volumeID: volumeID, want: want, table: obs.table, lvs: obs.cacheLVs, uncachedWrites: obs.uncachedWrites}
	for _, s := range steps {
		e.faults.Reached(ctx, op+"/"+string(s))
		if err := run.apply(ctx, s); err != nil {
			return Result{Changed: true}, fmt.Errorf("%s volume %s: step %s: %w", op, volumeID, s, err)
		}
	}
	klog.InfoS("Changed volume", "volumeID", volumeID, "operation", op, "duration", time.Since(start))
	return Result{Changed: true, Warmed: run.warmed}, nil
}

// RecoverInterruptedReload undoes a reload a crash cut short: the inactive
// table is dropped and the last live table resumed, so a suspended device
// never holds application I/O forever (safety rule 5). The caller holds the
// volume's lock, so no reload of this process is in flight.
func (e *Engine) RecoverInterruptedReload(ctx context.Context, volumeID string) error {
	name := DeviceName(volumeID)
	info, err := e.dm.Info(ctx, name)
	if err != nil {
		return err
	}
	if info.InactiveTable {
		klog.InfoS("Dropping table left loaded by an interrupted change", "volumeID", volumeID)
		if err := e.dm.ClearInactive(ctx, name); err != nil {
			return err
		}
	}
	if info.Suspended {
		klog.InfoS("Resuming device left suspended by an interrupted change", "volumeID", volumeID)
		return e.dm.Resume(ctx, name)
	}
	return nil
}

// reload swaps name's live table for table. Suspending first lets a live
// dm-cache commit its metadata before a new cache table reads it; on any
// failure the old table is resumed, so the volume keeps serving.
func (e *Engine) reload(ctx context.Context, op, volumeID string, table dm.Table) error {
	return e.reloadWith(ctx, op, volumeID, table, nil)
}

// reloadWith is reload that also runs whileSuspended, if set, between the
// suspend and the load: no I/O reaches the device meanwhile.
func (e *Engine) reloadWith(ctx context.Context, op, volumeID string, table dm.Table, whileSuspended func(context.Context) error) error {
	return e.swapTable(ctx, op, volumeID, table, e.suspend, whileSuspended)
}

// SuspendTimeout bounds how long a reload's suspend waits for the I/O in
// flight on the device (the kernel's wait is interruptible; no suspend
// freezes the filesystem, whose wait would not be). A working device finishes
// its requests in well under a second, a busy emulated HDD in seconds; one
// that never completes them (a hung SSD under a cache) would otherwise hold
// the caller, and the volume's lock, for as long as it hangs.
const SuspendTimeout = time.Minute

// suspend is a reload's suspend: it waits for the I/O in flight, and gives
// up after SuspendTimeout.
func (e *Engine) suspend(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, SuspendTimeout)
	defer cancel()
	return e.dm.Suspend(ctx, name)
}

// swapTable is reloadWith with the suspend given.
func (e *Engine) swapTable(ctx context.Context, op, volumeID string, table dm.Table, suspend func(context.Context, string) error, whileSuspended func(context.Context) error) error {
	name := DeviceName(volumeID)
	e.layouts.forget(volumeID) // whatever the outcome, the caller records the new one
	if err := suspend(ctx, name); err != nil {
		// dmsetup killed after its ioctl leaves the device suspended all the same.
		return errors.Join(err, e.rollback(ctx, name))
	}
	e.faults.Reached(ctx, op+"/suspended")
	if whileSuspended != nil {
		if err := whileSuspended(ctx); err != nil {
			return errors.Join(err, e.rollback(ctx, name))
		}
	}
	if err := e.dm.Load(ctx, name, table); err != nil {
		return errors.Join(err, e.rollback(ctx, name))
	}
	e.faults.Reached(ctx, op+"/loaded")
	if err := e.dm.Resume(ctx, name); err != nil {
		return errors.Join(err, e.rollback(ctx, name))
	}
	return nil
}

// reloadLoadedAhead is reload for a table whose constructor reads nothing
// the live table writes (a cache table over a metadata LV no table uses):
// it is loaded before the suspend, so that the device waits only for the
// swap, not for dm-cache to open the metadata and size its policy. If
// whileSuspended returns rewrite, the loaded table is dropped, rewrite
// changes what it is to read, and the table is loaded again, all with the
// device suspended: dm-cache reads its metadata when loaded, and would not
// see a change made after. suspended is how long the device held its I/O.
func (e *Engine) reloadLoadedAhead(ctx context.Context, op, volumeID string, table dm.Table, whileSuspended func(context.Context) (rewrite func(context.Context) error, err error)) (suspended time.Duration, err error) {
	name := DeviceName(volumeID)
	e.layouts.forget(volumeID) // whatever the outcome, the caller records the new one
	if err := e.dm.Load(ctx, name, table); err != nil {
		return 0, errors.Join(err, e.rollback(ctx, name))
	}
	e.faults.Reached(ctx, op+"/loaded")
	start := time.Now()
	if err := e.suspend(ctx, name); err != nil {
		return time.Since(start), errors.Join(err, e.rollback(ctx, name))
	}
	e.faults.Reached(ctx, op+"/suspended")
	rewrite, err := whileSuspended(ctx)
	if err == nil && rewrite != nil {
		err = e.loadAgainAfter(ctx, name, table, rewrite)
	}
	if err == nil {
		err = e.dm.Resume(ctx, name)
	}
	if err != nil {
		err = errors.Join(err, e.rollback(ctx, name))
	}
	return time.Since(start), err // until resumed, or rolled back
}

// loadAgainAfter drops name's loaded table, runs rewrite and loads table
// again.
func (e *Engine) loadAgainAfter(ctx context.Context, name string, table dm.Table, rewrite func(context.Context) error) error {
	if err := e.dm.ClearInactive(ctx, name); err != nil {
		return err
	}
	if err := rewrite(ctx); err != nil {
		return err
	}
	return e.dm.Load(ctx, name, table)
}

// rollbackTimeout bounds putting a device's live table back in service after
// a failed reload; generous, as a busy node's dmsetup can be slow.
const rollbackTimeout = 5 * time.Minute

// rollback drops any loaded table and resumes the live one. It runs on a
// context of its own: the caller's may be what made the reload fail
// (kubelet's deadline, SIGTERM in a rollout), and a device left suspended
// holds the volume's I/O forever.
func (e *Engine) rollback(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	return errors.Join(e.dm.ClearInactive(ctx, name), e.dm.Resume(ctx, name))
}
