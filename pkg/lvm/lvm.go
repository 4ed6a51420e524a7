// Package lvm manages ssdcache's two volume groups: one on the node's HDDs
// holding origin volumes, one on its NVMe devices holding cache slices. Every
// LV carries tags naming its volume and role, so the node rebuilds its view
// from LVM and the kernel after a restart instead of trusting a file.
package lvm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// ErrNotFound is returned for a volume group or logical volume that does not exist.
var ErrNotFound = errors.New("not found")

// ErrNoSpace is returned when a volume group cannot hold the requested size.
var ErrNoSpace = errors.New("not enough free space in volume group")

// Tag prefixes put on every LV and VG ssdcache creates.
const (
	VolumeTagPrefix = "ssdcache.io/volume="
	RoleTagPrefix   = "ssdcache.io/role="
	PoolTagPrefix   = "ssdcache.io/pool="
	// OwnerTagPrefix marks a cache LV with what asked for it: a CacheBinding
	// as <namespace>/<name>/<uid>, so that the node can name the binding of a
	// cache it finds unclaimed, after a restart too.
	OwnerTagPrefix = "ssdcache.io/owner="
)

// Role says what an LV is for.
type Role string

const (
	RoleOrigin        Role = "origin"
	RoleCacheMetadata Role = "cache-metadata"
	RoleCacheData     Role = "cache-data"
)

// HasTag says whether the LV carries tag.
func (lv LV) HasTag(tag string) bool { return slices.Contains(lv.Tags, tag) }

// Tags returns the tags of an LV of volumeID with role.
func Tags(volumeID string, role Role) []string {
	return []string{VolumeTagPrefix + volumeID, RoleTagPrefix + string(role)}
}

// LV is a logical volume as LVM reports it.
type LV struct {
	Name   string
	VG     string
	Size   uint64 // bytes
	Tags   []string
	Path   string
	DevNum dm.DevNum // zero when the LV is not active
	// Partial is set for an LV with extents on a PV that LVM reports
	// missing (lv_health_status "partial").
	Partial bool
}

// Volume returns the volume ID from the LV's tags, or "" if it has none.
func (lv LV) Volume() string { return lv.tagValue(VolumeTagPrefix) }

// Owner returns what the LV was made for (OwnerTagPrefix), or "".
func (lv LV) Owner() string { return lv.tagValue(OwnerTagPrefix) }

// Role returns the LV's role from its tags.
func (lv LV) Role() Role { return Role(lv.tagValue(RoleTagPrefix)) }

func (lv LV) tagValue(prefix string) string {
	for _, t := range lv.Tags {
		if v, ok := strings.CutPrefix(t, prefix); ok {
			return v
		}
	}
	return ""
}

// VG is a volume group as LVM reports it.
type VG struct {
	Name       string
	Size       uint64
	Free       uint64
	ExtentSize uint64
	Tags       []string
	// MissingPVs counts the VG's PVs whose device LVM does not find: a dead
	// or removed disk. LVM refuses to change such a VG (no vgextend, no
	// lvcreate) until they are removed (ReduceMissing).
	MissingPVs uint64
}

// PV is a physical volume and the VG it belongs to ("" for none).
type PV struct {
	Name string
	VG   string
}

// Interface is the LVM surface ssdcache uses.
type Interface interface {
	ListPVs(ctx context.Context) ([]PV, error)
	// GetVG returns ErrNotFound when the VG does not exist.
	GetVG(ctx context.Context, name string) (VG, error)
	CreateVG(ctx context.Context, name string, devices, tags []string) error
	ExtendVG(ctx context.Context, name string, devices []string) error
	ListLVs(ctx context.Context, vg string) ([]LV, error)
	// CreateLV creates an active LV whose first bytes and signatures are wiped,
	// so a new volume never shows a deleted volume's filesystem.
	CreateLV(ctx context.Context, vg, name string, size uint64, tags []string) (LV, error)
	ExtendLV(ctx context.Context, vg, name string, size uint64) error
	// ActivateLV makes an inactive LV (e.g. after a reboot without autoactivation) usable.
	ActivateLV(ctx context.Context, vg, name string) error
	// RemoveLV returns ErrNotFound when the LV does not exist.
	RemoveLV(ctx context.Context, vg, name string) error
	// ChangeTags adds and deletes tags of the LVs in one command, one
	// metadata update per VG (the shutdown marks of every volume of a node
	// in one lvchange). Deleting a tag an LV lacks is no error. The LVs are
	// named by VG and Name; an LV that does not exist fails the call, and
	// the others are changed all the same.
	ChangeTags(ctx context.Context, add, del []string, lvs ...LV) error
	// ReduceMissing removes vg's missing PVs together with every LV that has
	// extents on them (vgreduce --removemissing --force). LVM refuses while
	// one of those LVs is open. Callers check first that losing those LVs
	// loses no data (Pools.RemoveMissing).
	ReduceMissing(ctx context.Context, vg string) error
	// KernelLVs lists the device-mapper devices named as LVs of vg
	// (DMName), read from the kernel: a VG whose only PV died is gone from
	// LVM, but its active LVs' devices stay until removed.
	KernelLVs(ctx context.Context, vg string) ([]KernelLV, error)
	// RemoveKernelLV removes one of those devices; the kernel refuses while
	// it is open. Callers check first that LVM no longer finds its VG and
	// that nothing uses it (Pools.RemoveStale).
	RemoveKernelLV(ctx context.Context, d KernelLV) error
}

// KernelLV is a device-mapper device named as an LV of a VG.
type KernelLV struct {
	// Device is its device-mapper name, DMName(VG, LV).
	Device string
	VG, LV string
	// UUID is its device-mapper UUID: LVM gives an LV's device
	// LVM-<VG uuid><LV uuid> (32 characters each).
	UUID      string
	DevNum    dm.DevNum
	OpenCount int
}

// lvmUUIDPrefix starts the device-mapper UUID of every LV LVM activates.
const lvmUUIDPrefix = "LVM-"

// VGUUID is the VG's half of an LV device's UUID; "" for a device LVM did
// not make, or one of an LV's hidden layers (a "-<layer>" suffix).
func (d KernelLV) VGUUID() string {
	id, ok := strings.CutPrefix(d.UUID, lvmUUIDPrefix)
	if !ok || len(id) != 64 {
		return ""
	}
	return id[:32]
}

// DMName is the device-mapper name LVM gives vg/lv: both joined by '-',
// each '-' in them doubled.
func DMName(vg, lv string) string {
	return strings.ReplaceAll(vg, "-", "--") + "-" + strings.ReplaceAll(lv, "-", "--")
}

// SplitDMName undoes DMName; ok is false for a name that is not
// <vg>-<lv> (no single '-', or a layer suffix such as "-real" after it).
func SplitDMName(name string) (vg, lv string, ok bool) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(name); i++ {
		switch {
		case name[i] != '-':
			cur.WriteByte(name[i])
		case i+1 < len(name) && name[i+1] == '-':
			cur.WriteByte('-')
			i++
		default:
			parts = append(parts, cur.String())
			cur.Reset()
		}
	}
	parts = append(parts, cur.String())
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// kernelLVsOf keeps the devices named as LVs of vg.
func kernelLVsOf(devs []dm.Device, vg string) []KernelLV {
	var out []KernelLV
	for _, d := range devs {
		if g, lv, ok := SplitDMName(d.Name); ok && g == vg {
			out = append(out, KernelLV{Device: d.Name, VG: g, LV: lv, UUID: d.UUID, DevNum: d.DevNum, OpenCount: d.OpenCount})
		}
	}
	return out
}

// FindLV returns the LV of vg named name, or ErrNotFound.
func FindLV(ctx context.Context, l Interface, vg, name string) (LV, error) {
	lvs, err := l.ListLVs(ctx, vg)
	if err != nil {
		return LV{}, err
	}
	for _, lv := range lvs {
		if lv.Name == name {
			return lv, nil
		}
	}
	return LV{}, fmt.Errorf("logical volume %s/%s: %w", vg, name, ErrNotFound)
}

// VolumeLVs returns the LVs of vg tagged with volumeID.
func VolumeLVs(ctx context.Context, l Interface, vg, volumeID string) ([]LV, error) {
	lvs, err := l.ListLVs(ctx, vg)
	if err != nil {
		return nil, err
	}
	var out []LV
	for _, lv := range lvs {
		if lv.Volume() == volumeID {
			out = append(out, lv)
		}
	}
	return out, nil
}
