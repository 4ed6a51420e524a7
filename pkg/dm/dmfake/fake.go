// Package dmfake is an in-memory device-mapper for unit tests: it keeps live
// and inactive tables and the suspend state the way the kernel does, records
// every call, and lets a test inject failures and status lines.
package dmfake

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

type device struct {
	num       dm.DevNum
	live      dm.Table
	inactive  *dm.Table
	suspended bool
	regions   map[uint64]*region
}

// DM is a fake dm.Interface. The zero value is not usable; call New.
type DM struct {
	mu      sync.Mutex
	devices map[string]*device
	next    uint32
	// nextRegion numbers dm-stats regions, across devices as the kernel does not.
	nextRegion uint64
	// Calls records each mutating call as "op name [table]".
	Calls []string
	// FailOn makes the named operation ("create", "load", "resume", ...) fail once.
	FailOn map[string]error
	// FailAfter makes the named operation take effect and then fail once, as
	// a dmsetup killed after its ioctl does.
	FailAfter map[string]error
	// StatusOverride replaces the synthesised status line of a device.
	StatusOverride map[string]string
	// StatesCalls counts States calls (one per monitor tick, whatever the devices).
	StatesCalls int
	// CacheUsed, when set, gives the used blocks a cache table's status
	// reports (the metadata it was loaded with, as dmfake.Metadata keeps
	// it); without it the status reports none.
	CacheUsed func(dm.CacheTarget) uint64
	// Record, when set, is called for every mutating operation, so a test can
	// merge dm calls with other fakes' calls into one ordered log.
	Record func(event string)
	// AreasAsked are the areas of each WrittenAreasAmong call, in order.
	AreasAsked [][]uint64
}

// New returns an empty fake with device numbers from major 253.
func New() *DM {
	return &DM{devices: map[string]*device{}, FailOn: map[string]error{}, FailAfter: map[string]error{}, StatusOverride: map[string]string{}}
}

var _ dm.Interface = (*DM)(nil)

func (f *DM) record(op, name string, table *dm.Table) error {
	event := op + " " + name
	if table != nil {
		event += " " + table.String()
	}
	f.Calls = append(f.Calls, event)
	if f.Record != nil {
		f.Record("dm " + event)
	}
	if err, ok := f.FailOn[op]; ok {
		delete(f.FailOn, op)
		return err
	}
	return nil
}

func (f *DM) get(name string) (*device, error) {
	d, ok := f.devices[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, dm.ErrNotFound)
	}
	return d, nil
}

func (f *DM) Create(_ context.Context, name string, table dm.Table) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("create", name, &table); err != nil {
		return err
	}
	if _, ok := f.devices[name]; ok {
		return fmt.Errorf("dmsetup create %s: device already exists", name)
	}
	f.next++
	f.devices[name] = &device{num: dm.DevNum{Major: 253, Minor: f.next}, live: table}
	return nil
}

func (f *DM) Load(_ context.Context, name string, table dm.Table) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("load", name, &table); err != nil {
		return err
	}
	d, err := f.get(name)
	if err != nil {
		return err
	}
	d.inactive = &table
	return nil
}

func (f *DM) Suspend(ctx context.Context, name string) error {
	return f.mutate(ctx, "suspend", name, func(d *device) { d.suspended = true })
}

// SuspendNoFlush records "suspend-noflush", so a test can tell it from a
// flushing suspend; FailOn and FailAfter take that name too.
func (f *DM) SuspendNoFlush(ctx context.Context, name string) error {
	return f.mutate(ctx, "suspend-noflush", name, func(d *device) { d.suspended = true })
}

func (f *DM) Resume(ctx context.Context, name string) error {
	return f.mutate(ctx, "resume", name, func(d *device) {
		if d.inactive != nil {
			d.live, d.inactive = *d.inactive, nil
		}
		d.suspended = false
	})
}

func (f *DM) ClearInactive(ctx context.Context, name string) error {
	return f.mutate(ctx, "clear", name, func(d *device) { d.inactive = nil })
}

// mutate changes a device as dmsetup would: not at all once ctx has ended
// (exec refuses to start a command whose context is done).
func (f *DM) mutate(ctx context.Context, op, name string, change func(*device)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		f.Calls = append(f.Calls, op+" "+name+" (not run: "+err.Error()+")")
		return fmt.Errorf("dmsetup %s %s: %w", op, name, err)
	}
	if err := f.record(op, name, nil); err != nil {
		return err
	}
	d, err := f.get(name)
	if err != nil {
		return err
	}
	change(d)
	if err, ok := f.FailAfter[op]; ok {
		delete(f.FailAfter, op)
		return err
	}
	return nil
}

func (f *DM) Remove(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("remove", name, nil); err != nil {
		return err
	}
	if _, err := f.get(name); err != nil {
		return err
	}
	delete(f.devices, name)
	return nil
}

func (f *DM) Table(_ context.Context, name string) (dm.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(name)
	if err != nil {
		return dm.Table{}, err
	}
	return d.live, nil
}

// Status synthesises a healthy status line for cache tables unless overridden.
// SetStatus sets StatusOverride[name] while other goroutines may read it.
func (f *DM) SetStatus(name, line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.StatusOverride[name] = line
}

func (f *DM) Status(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(name)
	if err != nil {
		return "", err
	}
	if s, ok := f.StatusOverride[name]; ok {
		return s, nil
	}
	c, ok := d.live.Target.(dm.CacheTarget)
	if !ok {
		return fmt.Sprintf("0 %d %s", d.live.Length, d.live.Target.Type()), nil
	}
	var used uint64
	if f.CacheUsed != nil {
		used = f.CacheUsed(c)
	}
	return fmt.Sprintf("0 %d cache 8 10/4096 %d %d/1000 0 0 0 0 0 0 0 1 %s 2 migration_threshold 2048 smq 0 rw -",
		d.live.Length, c.BlockSectors, used, c.Mode), nil
}

func (f *DM) States(ctx context.Context, keep func(name string) bool) (map[string]dm.DeviceState, error) {
	f.mu.Lock()
	names := make([]string, 0, len(f.devices))
	for name := range f.devices {
		if keep == nil || keep(name) {
			names = append(names, name)
		}
	}
	f.StatesCalls++
	f.mu.Unlock()
	states := map[string]dm.DeviceState{}
	for _, name := range names {
		table, err := f.Table(ctx, name)
		if err != nil {
			return nil, err
		}
		status, err := f.Status(ctx, name)
		if err != nil {
			return nil, err
		}
		states[name] = dm.DeviceState{Table: table, Status: status}
	}
	return states, nil
}

func (f *DM) List(context.Context) ([]dm.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]dm.Device, 0, len(f.devices))
	for name, d := range f.devices {
		out = append(out, d.info(name))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (d *device) info(name string) dm.Device {
	return dm.Device{Name: name, DevNum: d.num, Suspended: d.suspended, InactiveTable: d.inactive != nil}
}

func (f *DM) Info(_ context.Context, name string) (dm.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(name)
	if err != nil {
		return dm.Device{}, err
	}
	return d.info(name), nil
}

// Suspended reports whether name is suspended (a test asserts none is left so).
func (f *DM) Suspended(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.devices[name]
	return ok && d.suspended
}

// HasInactive reports whether name has a loaded table not yet resumed.
func (f *DM) HasInactive(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.devices[name]
	return ok && d.inactive != nil
}

// region is a fake dm-stats region counting writes.
type region struct {
	areaSectors uint64
	touched     map[uint64]bool
	// uncached: made by TrackUncachedWrites, which TrackWrites leaves alone.
	uncached bool
}

func (f *DM) TrackWrites(_ context.Context, name string, areaSectors uint64) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("track-writes", name, nil); err != nil {
		return 0, err
	}
	d, err := f.get(name)
	if err != nil {
		return 0, err
	}
	maps.DeleteFunc(d.regions, func(_ uint64, r *region) bool { return !r.uncached })
	return f.newRegion(d, areaSectors, false), nil
}

func (f *DM) newRegion(d *device, areaSectors uint64, uncached bool) uint64 {
	if d.regions == nil {
		d.regions = map[uint64]*region{}
	}
	d.regions[f.nextRegion] = &region{areaSectors: areaSectors, touched: map[uint64]bool{}, uncached: uncached}
	f.nextRegion++
	return f.nextRegion - 1
}

func (f *DM) TrackUncachedWrites(_ context.Context, name string, areaSectors uint64) (dm.WriteRegion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("track-uncached-writes", name, nil); err != nil {
		return dm.WriteRegion{}, err
	}
	d, err := f.get(name)
	if err != nil {
		return dm.WriteRegion{}, err
	}
	if r, ok := uncachedRegion(d); ok {
		return r, nil
	}
	return dm.WriteRegion{ID: f.newRegion(d, areaSectors, true), AreaSectors: areaSectors}, nil
}

func (f *DM) UncachedWrites(_ context.Context, name string) (dm.WriteRegion, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err, ok := f.FailOn["uncached-writes"]; ok {
		delete(f.FailOn, "uncached-writes")
		return dm.WriteRegion{}, false, err
	}
	d, err := f.get(name)
	if err != nil {
		return dm.WriteRegion{}, false, err
	}
	r, ok := uncachedRegion(d)
	return r, ok, nil
}

func uncachedRegion(d *device) (dm.WriteRegion, bool) {
	for _, id := range slices.Sorted(maps.Keys(d.regions)) {
		if r := d.regions[id]; r.uncached {
			return dm.WriteRegion{ID: id, AreaSectors: r.areaSectors}, true
		}
	}
	return dm.WriteRegion{}, false
}

func (f *DM) WrittenAreas(_ context.Context, name string, id uint64) ([]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(name)
	if err != nil {
		return nil, err
	}
	r, ok := d.regions[id]
	if !ok {
		return nil, fmt.Errorf("%s has no dm-stats write region %d", name, id)
	}
	return sortedAreas(r.touched), nil
}

func (f *DM) WrittenAreasAmong(ctx context.Context, name string, id uint64, areas []uint64) ([]uint64, error) {
	f.mu.Lock()
	f.AreasAsked = append(f.AreasAsked, slices.Clone(areas))
	f.mu.Unlock()
	written, err := f.WrittenAreas(ctx, name, id)
	return slices.DeleteFunc(written, func(a uint64) bool { return !slices.Contains(areas, a) }), err
}

func sortedAreas(touched map[uint64]bool) []uint64 {
	var areas []uint64
	for a := range touched {
		areas = append(areas, a)
	}
	sort.Slice(areas, func(i, j int) bool { return areas[i] < areas[j] })
	return areas
}

func (f *DM) Untrack(_ context.Context, name string, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("untrack", name, nil); err != nil {
		return err
	}
	d, err := f.get(name)
	if err != nil {
		return err
	}
	delete(d.regions, id)
	return nil
}

// Write stands for an application's write of one sector through name: the
// tracking regions count it.
func (f *DM) Write(name string, sector uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.devices[name]; ok {
		for _, r := range d.regions {
			r.touched[sector/r.areaSectors] = true
		}
	}
}
