package dm

import (
	"context"
	"errors"
)

// ErrNotFound is returned when a named device-mapper device does not exist.
var ErrNotFound = errors.New("device-mapper device not found")

// Device is a device-mapper device as the kernel reports it.
type Device struct {
	Name   string
	DevNum DevNum
	// Suspended devices hold all I/O: a reload interrupted by a crash leaves one.
	Suspended bool
	// InactiveTable is set when a table was loaded but never resumed.
	InactiveTable bool
	// OpenCount is how many openers the device has (mounts, processes).
	OpenCount int
	// UUID is what the device's creator named it with ("" for none; LVM
	// gives an LV's device LVM-<VG uuid><LV uuid>). Only
	// Dmsetup.ListWithUUIDs reads it.
	UUID string
}

// DeviceState is a device's live table and raw status line.
type DeviceState struct {
	Table  Table
	Status string
}

// Interface is the set of device-mapper operations ssdcache needs. The real
// implementation runs dmsetup; tests use an in-memory fake (package dmfake).
type Interface interface {
	// Create creates and activates name with table; the /dev/mapper node exists afterwards.
	Create(ctx context.Context, name string, table Table) error
	// Load loads table into name's inactive slot; it becomes live on Resume.
	Load(ctx context.Context, name string, table Table) error
	// Suspend quiesces name, holding new I/O until Resume, once the I/O in
	// flight has completed. It does not freeze a filesystem on name
	// (DM_SKIP_LOCKFS_FLAG, dmsetup suspend --nolockfs): every table
	// ssdcache swaps presents the same bytes as the one it replaces (a
	// writethrough cache or the origin alone), so the filesystem needs no
	// consistent point, and a freeze would write back every dirty page of
	// it while the device is held, a wait that grows with the page cache
	// and that no signal interrupts.
	Suspend(ctx context.Context, name string) error
	// SuspendNoFlush is Suspend with I/O a target pushes back kept for the
	// next table rather than failed (DM_NOFLUSH_FLAG): the suspend of a
	// table whose device no longer answers. It still waits for the I/O in
	// flight.
	SuspendNoFlush(ctx context.Context, name string) error
	// Resume activates a loaded table, or just resumes I/O.
	Resume(ctx context.Context, name string) error
	// ClearInactive discards a loaded table that will not be resumed.
	ClearInactive(ctx context.Context, name string) error
	// Remove deletes name; ErrNotFound if it does not exist.
	Remove(ctx context.Context, name string) error
	// Table returns name's live table; ErrNotFound if it does not exist.
	Table(ctx context.Context, name string) (Table, error)
	// Status returns name's raw status line without committing cache metadata
	// (--noflush), so that sampling adds no I/O.
	Status(ctx context.Context, name string) (string, error)
	// States returns the live table and status line (--noflush) of every
	// device whose name keep accepts (nil: every device), so that watching
	// N devices costs one listing and their own reads: the node's other
	// devices (the pools' LVs, other drivers' and tenants' devices) are
	// listed, never read.
	States(ctx context.Context, keep func(name string) bool) (map[string]DeviceState, error)
	// List returns every device-mapper device.
	List(ctx context.Context) ([]Device, error)
	// Info returns one device; ErrNotFound if it does not exist.
	Info(ctx context.Context, name string) (Device, error)
	// TrackWrites starts counting the writes through name per area of
	// areaSectors (dm-stats, kept by dm core whatever the table), after
	// deleting any tracking an earlier, interrupted call left; it returns the
	// tracking region.
	TrackWrites(ctx context.Context, name string, areaSectors uint64) (uint64, error)
	// WrittenAreas lists the areas of region that saw a write since
	// TrackWrites; writes still in flight are not counted, so call it with
	// the device suspended.
	WrittenAreas(ctx context.Context, name string, region uint64) ([]uint64, error)
	// WrittenAreasAmong is WrittenAreas for the given areas alone (sorted):
	// it reads only their counters, so that its cost follows the areas asked
	// for rather than the region's size.
	WrittenAreasAmong(ctx context.Context, name string, region uint64, areas []uint64) ([]uint64, error)
	// Untrack deletes region.
	Untrack(ctx context.Context, name string, region uint64) error
	// TrackUncachedWrites starts counting the writes through name per area
	// of areaSectors in a region of its own, which TrackWrites leaves
	// alone, and returns it. A region it made earlier is kept and returned
	// instead: it has counted every write since, which is all a caller
	// needs.
	TrackUncachedWrites(ctx context.Context, name string, areaSectors uint64) (WriteRegion, error)
	// UncachedWrites returns the region TrackUncachedWrites made on name,
	// if there is one.
	UncachedWrites(ctx context.Context, name string) (WriteRegion, bool, error)
}

// WriteRegion is a dm-stats region counting writes, in areas of
// AreaSectors from sector 0.
type WriteRegion struct {
	ID, AreaSectors uint64
}

// DevicePath is where a device-mapper device's node lives.
func DevicePath(name string) string { return "/dev/mapper/" + name }
