package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// StageSpec describes a volume to bring up as its dm device.
type StageSpec struct {
	VolumeID string
	// Origin is the HDD-backed device (see OriginLV and OriginDisk). It is
	// never written to by ssdcache itself.
	Origin Origin
}

// Stage makes the volume's dm device exist, linear, and returns its path. A
// device that already exists is checked and kept as it is, cache included:
// the cache belongs to whoever attached it (the node agent, for the
// volume's CacheBinding), never to staging.
func (e *Engine) Stage(ctx context.Context, spec StageSpec) (string, error) {
	want, err := e.stageTarget(spec)
	if err != nil {
		return "", err
	}
	obs, err := e.observe(ctx, spec.VolumeID)
	if err != nil {
		return "", err
	}
	if obs.staged {
		err = e.checkStaged(ctx, spec.VolumeID, obs, want)
	} else {
		e.faults.Reached(ctx, "stage/create-device")
		err = e.dm.Create(ctx, DeviceName(spec.VolumeID), linearTable(want))
	}
	if err == nil && !obs.staged {
		obs.cacheLVs, err = e.activateKept(ctx, spec.VolumeID, obs.cacheLVs)
	}
	if err == nil {
		obs.cacheLVs, err = e.judgeShutdownMark(ctx, spec.VolumeID, obs)
	}
	if err == nil {
		err = e.countWritesOverKept(ctx, spec.VolumeID, obs.cacheLVs)
	}
	if err != nil {
		return "", fmt.Errorf("stage volume %s: %w", spec.VolumeID, err)
	}
	return DevicePath(spec.VolumeID), nil
}

func (e *Engine) stageTarget(spec StageSpec) (desired, error) {
	if err := ValidateVolumeID(spec.VolumeID); err != nil {
		return desired{}, err
	}
	if spec.Origin.DevNum.IsZero() || spec.Origin.Bytes < dm.SectorSize {
		return desired{}, fmt.Errorf("origin %+v of volume %s is unknown or empty: %w", spec.Origin, spec.VolumeID, ErrInvalid)
	}
	return desired{origin: spec.Origin.DevNum, length: spec.Origin.Bytes / dm.SectorSize, minBlockSectors: e.minBlockSectors}, nil
}

// checkStaged verifies an existing device maps the right origin and undoes a
// change a crash interrupted.
func (e *Engine) checkStaged(ctx context.Context, volumeID string, obs observed, want desired) error {
	if origin, ok := originOf(obs.table); !ok || origin != want.origin {
		return fmt.Errorf("device %s has table %q, want origin %s: %w", DeviceName(volumeID), obs.table, want.origin, ErrOriginMismatch)
	}
	return e.RecoverInterruptedReload(ctx, volumeID)
}

// SetCache converges a staged volume's cache to spec (nil: no cache) and
// reports what it did. It is Attach, Detach, Resize, Pause and Resume in
// one: the difference is only in spec.
func (e *Engine) SetCache(ctx context.Context, volumeID string, spec *Spec) (Result, error) {
	obs, want, err := e.current(ctx, volumeID)
	if err != nil {
		return Result{}, err
	}
	if spec != nil {
		if err := spec.Validate(); err != nil {
			return Result{}, err
		}
		if want.vg, err = e.Pools().CacheVG(spec.Class); err != nil {
			return Result{}, err
		}
	}
	want.cache = spec
	return e.converge(ctx, volumeID, opName(obs, spec), obs, want)
}

// current observes a staged volume and returns a target equal to its
// present origin and length, for callers to modify.
func (e *Engine) current(ctx context.Context, volumeID string) (observed, desired, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return observed{}, desired{}, err
	}
	obs, err := e.observe(ctx, volumeID)
	if err != nil {
		return obs, desired{}, err
	}
	if !obs.staged {
		return obs, desired{}, fmt.Errorf("volume %s: %w", volumeID, ErrNotStaged)
	}
	origin, ok := originOf(obs.table)
	if !ok {
		return obs, desired{}, fmt.Errorf("device %s has a table ssdcache did not make: %q", DeviceName(volumeID), obs.table)
	}
	if err := e.RecoverInterruptedReload(ctx, volumeID); err != nil {
		return obs, desired{}, err
	}
	return obs, desired{origin: origin, length: obs.table.Length, minBlockSectors: e.minBlockSectors}, nil
}

func opName(obs observed, spec *Spec) string {
	_, cached := obs.table.Target.(dm.CacheTarget)
	switch {
	case spec == nil:
		return "detach"
	case !cached:
		return "attach"
	}
	return "change"
}

// Attach gives a staged volume a cache (or changes the one it has to spec).
func (e *Engine) Attach(ctx context.Context, volumeID string, spec Spec) error {
	_, err := e.SetCache(ctx, volumeID, &spec)
	return err
}

// Detach removes a volume's cache; no flush is needed (rule 1). An
// unstaged volume loses the cache LVs a clean unstage kept.
func (e *Engine) Detach(ctx context.Context, volumeID string) error {
	_, err := e.SetCache(ctx, volumeID, nil)
	if errors.Is(err, ErrNotStaged) {
		return e.removeKept(ctx, volumeID)
	}
	return err
}

// Grow makes a staged volume's device as large as its origin now is, after
// the origin was extended. A cached volume is re-cached with fresh metadata,
// filled from its hot set.
func (e *Engine) Grow(ctx context.Context, volumeID string, origin Origin) error {
	obs, want, err := e.current(ctx, volumeID)
	if err != nil {
		return err
	}
	if origin.DevNum != want.origin {
		return fmt.Errorf("grow volume %s: origin %s is not the staged origin %s: %w", volumeID, origin.DevNum, want.origin, ErrOriginMismatch)
	}
	if origin.Bytes/dm.SectorSize < want.length {
		return fmt.Errorf("origin %s of volume %s shrank to %d bytes: %w", origin.Path, volumeID, origin.Bytes, ErrInvalid)
	}
	want.length = origin.Bytes / dm.SectorSize
	if spec, ok := e.specOf(obs); ok {
		spec.Warm = true
		want.cache = &spec
		want.vg = obs.cacheLVs[0].VG
	}
	_, err = e.converge(ctx, volumeID, "grow", obs, want)
	return err
}

// specOf reconstructs the spec of the cache a volume has now: a
// writethrough cache table is ReadCache; a linear table with the volume's
// cache LVs kept is Paused (a legacy passthrough table, from before Paused
// was linear, counts as Paused too).
func (e *Engine) specOf(obs observed) (Spec, bool) {
	live, isCache := obs.table.Target.(dm.CacheTarget)
	for _, lv := range obs.cacheLVs {
		if lv.Role() != lvm.RoleCacheData || lv.DevNum.IsZero() || (isCache && lv.DevNum != live.Data) {
			continue
		}
		mode := ModePaused
		if isCache && live.Mode == dm.Writethrough {
			mode = ModeReadCache
		}
		return Spec{SizeBytes: requestedBytes(lv), Mode: mode, Class: e.classOf(lv.VG), Owner: lv.Owner()}, true
	}
	return Spec{}, false
}

func (e *Engine) classOf(vg string) string {
	for class, v := range e.Pools().CacheVGs {
		if v == vg {
			return class
		}
	}
	return ""
}

// DropCache swaps a failing cache out for a linear table at once, leaving
// its LVs alone (the SSD may not answer); safety rule 4. It reads only the
// kernel's table: every call saved is time the failing SSD serves reads.
// seen is the table the failure was seen in, without the volume's lock: if
// the live table is another (a resize made new cache LVs under the same
// names) or the volume is gone (unstaged), it drops nothing and returns
// ErrCacheChanged.
//
// Its suspend (dropSuspend) neither freezes the filesystem nor waits longer
// than DropSuspendTimeout for the I/O in flight, which fails the drop, to be
// tried again. It cannot bound dm-cache's postsuspend, which commits the
// metadata to the cache device and waits for it where no signal reaches:
// over a metadata device that never answers, the call returns only once the
// device answers or fails, holding the volume's lock (the device is
// suspending: any other change would wait on it too). Callers that must
// not wait with it run it on a goroutine of its own.
func (e *Engine) DropCache(ctx context.Context, volumeID string, seen dm.Table) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	table, err := e.dm.Table(ctx, DeviceName(volumeID))
	if errors.Is(err, dm.ErrNotFound) {
		return fmt.Errorf("volume %s was unstaged: %w", volumeID, ErrCacheChanged)
	}
	if err != nil {
		return err
	}
	if table.String() != seen.String() {
		return fmt.Errorf("volume %s: table %q, the failure was seen in %q: %w", volumeID, table, seen, ErrCacheChanged)
	}
	c, cached := table.Target.(dm.CacheTarget)
	if !cached {
		return nil
	}
	if err := e.RecoverInterruptedReload(ctx, volumeID); err != nil {
		return err
	}
	klog.InfoS("Dropping failing cache", "volumeID", volumeID)
	return e.swapTable(ctx, "drop", volumeID, linearTable(desired{origin: c.Origin, length: table.Length}), e.dropSuspend, nil)
}

// DropSuspendTimeout bounds the wait of a drop's suspend for the I/O in
// flight on the failing cache. A cache device that fails returns errors
// within the SSD driver's timeouts and its I/O ends at once after; one
// that hangs never ends it, and the drop is better tried again at a later
// tick (with the volume's lock free meanwhile) than waiting: ten seconds is
// far above what completing I/O takes and short beside a hang.
const DropSuspendTimeout = 10 * time.Second

// ErrCacheNotAnswering: the failing cache's I/O did not end within
// DropSuspendTimeout, so it could not be suspended and dropped yet.
var ErrCacheNotAnswering = errors.New("the cache device's I/O did not complete")

// dropSuspend suspends a failing cache without freezing its filesystem or
// flushing: a freeze writes the journal and dirty pages, and in
// writethrough the writes to cached blocks go to the SSD too, which a hung
// one never completes (the freeze's wait is not interruptible); noflush
// also keeps I/O that dm-cache pushes back at postsuspend for the linear
// table instead of failing it. Nothing needs flushing: the origin holds
// every byte (safety rule 1).
func (e *Engine) dropSuspend(ctx context.Context, name string) error {
	sctx, cancel := context.WithTimeout(ctx, DropSuspendTimeout)
	defer cancel()
	err := e.dm.SuspendNoFlush(sctx, name)
	if err != nil && ctx.Err() == nil && sctx.Err() != nil {
		return fmt.Errorf("suspend %s for %s: %w: %w", name, DropSuspendTimeout, ErrCacheNotAnswering, err)
	}
	return err
}

// Unstage removes the volume's dm device, keeping what the cache held as
// the volume's hot set. A live cache over the volume's origin LV keeps its
// LVs too, tagged as shut down cleanly, for the next stage to map again
// (kept.go); any other cache LVs are removed. The device must no longer be
// mounted or open.
func (e *Engine) Unstage(ctx context.Context, volumeID string) error {
	if err := ValidateVolumeID(volumeID); err != nil {
		return err
	}
	obs, err := e.observe(ctx, volumeID)
	if err != nil {
		return err
	}
	if obs.staged {
		if err := e.RecoverInterruptedReload(ctx, volumeID); err != nil {
			return err
		}
		e.faults.Reached(ctx, "unstage/remove-device")
		e.layouts.forget(volumeID)
		if err := e.dm.Remove(ctx, DeviceName(volumeID)); err != nil && !errors.Is(err, dm.ErrNotFound) {
			return fmt.Errorf("remove device of volume %s: %w", volumeID, err)
		}
		if e.reads != nil {
			// Its device number may go to another device.
			if err := e.reads.Untrack(ctx, DeviceName(volumeID)); err != nil {
				return err
			}
		}
	}
	run := &applier{Engine: e, op: "unstage", volumeID: volumeID, lvs: obs.cacheLVs}
	if _, cached := obs.table.Target.(dm.CacheTarget); cached {
		// Removing the device shut the cache down cleanly: its metadata is whole.
		run.saveHotSet(ctx)
		return run.keepOrRemove(ctx, obs.table)
	}
	if _, kept := taggedClean(obs.cacheLVs); kept {
		return nil // unstaged again: what the first unstage kept stays kept
	}
	e.faults.Reached(ctx, "unstage/remove-cache-lvs")
	return run.removeCacheLVs(ctx)
}

// State is what a staged volume looks like now.
type State struct {
	VolumeID string
	Staged   bool
	Table    dm.Table
	// Cached means the live table is a cache.
	Cached bool
	// HasCache means the volume has a cache, live or paused, described by Spec.
	HasCache bool
	Spec     Spec
	// Status is the parsed dm-cache status of a cached volume.
	Status *dm.CacheStatus
	// CacheDevices are the paths of the cache's metadata and data LVs.
	CacheDevices []string
}

// Inspect reports a volume's state, reading dm-cache status without
// committing metadata. Reads take no volume lock, so an operation may swap
// the table between reading it and reading its status (a detach, a
// promotion); the volume is then looked at again.
func (e *Engine) Inspect(ctx context.Context, volumeID string) (State, error) {
	for attempt := 1; ; attempt++ {
		st, err := e.inspect(ctx, volumeID)
		if !errors.Is(err, errTableSwapped) || attempt == inspectAttempts {
			return st, err
		}
	}
}

// inspectAttempts bounds Inspect's looks at a volume whose table keeps
// changing under it.
const inspectAttempts = 3

// errTableSwapped: the status read is not of the cache table read before it.
var errTableSwapped = errors.New("the table changed while it was read")

func (e *Engine) inspect(ctx context.Context, volumeID string) (State, error) {
	st := State{VolumeID: volumeID}
	obs, err := e.observe(ctx, volumeID)
	if err != nil || !obs.staged {
		return st, err
	}
	st.Staged, st.Table = true, obs.table
	st.Spec, st.HasCache = e.specOf(obs)
	live, isCache := obs.table.Target.(dm.CacheTarget)
	for _, lv := range obs.cacheLVs {
		// A live cache's health is that of the LVs its table uses; a second
		// metadata LV (a promotion's, being written or removed) may vanish.
		if !isCache || lv.DevNum == live.Metadata || lv.DevNum == live.Data {
			st.CacheDevices = append(st.CacheDevices, lv.Path)
		}
	}
	if _, st.Cached = obs.table.Target.(dm.CacheTarget); !st.Cached {
		return st, nil
	}
	st.Status, err = e.cacheStatus(ctx, volumeID)
	return st, err
}

// cacheStatus reads a cached volume's dm-cache status without committing
// its metadata.
func (e *Engine) cacheStatus(ctx context.Context, volumeID string) (*dm.CacheStatus, error) {
	line, err := e.dm.Status(ctx, DeviceName(volumeID))
	if err != nil {
		return nil, err
	}
	status, err := dm.ParseCacheStatus(line)
	if errors.Is(err, dm.ErrNotCacheTarget) {
		return nil, fmt.Errorf("%w: %w", errTableSwapped, err)
	}
	if err != nil {
		return nil, err
	}
	return &status, nil
}

// Health reports every staged volume's kernel state, its table and
// dm-cache status, from one listing and each volume's own table and status
// reads (dm.States), without LVM: the monitor
// calls it every second, and per-volume calls (or LVM scans, which contend
// for the VG lock) would slow the drop of a failing cache as volumes are
// added. CacheDevices and Spec are left empty; Cached means the live table
// is a cache.
func (e *Engine) Health(ctx context.Context) (map[string]State, error) {
	devs, err := e.dm.States(ctx, func(name string) bool { _, ok := volumeOfDevice(name); return ok })
	if err != nil {
		return nil, err
	}
	states := map[string]State{}
	for name, d := range devs {
		id, _ := volumeOfDevice(name) // States kept only volumes' devices
		st := State{VolumeID: id, Staged: true, Table: d.Table}
		if _, st.Cached = d.Table.Target.(dm.CacheTarget); st.Cached {
			status, err := dm.ParseCacheStatus(d.Status)
			if err != nil {
				klog.ErrorS(err, "Reading cache status", "volumeID", id)
				continue
			}
			st.Status = &status
		}
		states[id] = st
	}
	return states, nil
}

// HealthOf is Health for one volume: its live table and, for a cache, its
// dm-cache status, from the kernel alone. The status read waits on
// dm-cache's metadata lock, which a commit to a cache device that does not
// answer holds for as long as it does not: the monitor reads each volume on
// a goroutine of its own. A volume not staged has Staged false.
func (e *Engine) HealthOf(ctx context.Context, volumeID string) (State, error) {
	st := State{VolumeID: volumeID}
	table, staged, err := e.LiveTable(ctx, volumeID)
	if err != nil || !staged {
		return st, err
	}
	st.Staged, st.Table = true, table
	if _, st.Cached = table.Target.(dm.CacheTarget); !st.Cached {
		return st, nil
	}
	st.Status, err = e.cacheStatus(ctx, volumeID)
	if errors.Is(err, dm.ErrNotFound) {
		return State{VolumeID: volumeID}, nil // unstaged since its table was read
	}
	return st, err
}

// IsCached says, from its table alone, whether a volume's live table is a cache.
func (e *Engine) IsCached(ctx context.Context, volumeID string) (bool, error) {
	table, _, err := e.LiveTable(ctx, volumeID)
	_, cached := table.Target.(dm.CacheTarget)
	return cached, err
}

// LiveTable returns a volume's live table and whether the volume is staged
// (has a device), from the kernel alone: no LVM scan, which kubelet's volume
// statistics, asked of every volume every minute, would otherwise cost.
func (e *Engine) LiveTable(ctx context.Context, volumeID string) (dm.Table, bool, error) {
	table, err := e.dm.Table(ctx, DeviceName(volumeID))
	switch {
	case errors.Is(err, dm.ErrNotFound):
		return dm.Table{}, false, nil
	case err != nil:
		return dm.Table{}, false, err
	}
	return table, true, nil
}

// ProbeCacheDevices reads from each device of a cached volume's cache. dm-cache
// reports a dead data device only once a metadata commit fails, which a
// read-only load may never cause, while reads that hit the cache already
// fail; a direct read finds out at once.
func (e *Engine) ProbeCacheDevices(st State) error {
	var errs []error
	for _, path := range st.CacheDevices {
		if err := e.dev.ProbeRead(path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// VolumesWithCacheLVs lists, with one LVM call per cache pool, the volumes
// that have cache LVs: live, paused, or left by a drop or a crash.
func (e *Engine) VolumesWithCacheLVs(ctx context.Context) (map[string]bool, error) {
	vols := map[string]bool{}
	for _, vg := range e.cacheVGs() {
		lvs, err := e.lvm.ListLVs(ctx, vg)
		if err != nil {
			return nil, fmt.Errorf("list cache LVs in %s: %w", vg, err)
		}
		for _, lv := range lvs {
			if r := lv.Role(); (r == lvm.RoleCacheMetadata || r == lvm.RoleCacheData) && lv.Volume() != "" {
				vols[lv.Volume()] = true
			}
		}
	}
	return vols, nil
}

// StagedVolume is a volume that has a dm device on this node.
type StagedVolume struct {
	ID     string
	DevNum dm.DevNum
	// Suspended is set for a device holding its I/O: a change in flight, or
	// one that was cut short and must be rolled back.
	Suspended bool
}

// volumeOfDevice returns the volume ID of a staged volume's device name:
// DevicePrefix and a valid ID. The pools' LVs (VG ssdcache-hdd: dm names
// "ssdcache--hdd-...") and every other device are not volumes.
func volumeOfDevice(name string) (string, bool) {
	id, ok := strings.CutPrefix(name, DevicePrefix)
	return id, ok && ValidateVolumeID(id) == nil
}

// StagedVolumes lists the volumes that have a dm device on this node.
func (e *Engine) StagedVolumes(ctx context.Context) ([]StagedVolume, error) {
	devs, err := e.dm.List(ctx)
	if err != nil {
		return nil, err
	}
	var vols []StagedVolume
	for _, d := range devs {
		if id, ok := volumeOfDevice(d.Name); ok {
			vols = append(vols, StagedVolume{ID: id, DevNum: d.DevNum, Suspended: d.Suspended})
		}
	}
	return vols, nil
}
