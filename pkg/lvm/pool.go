package lvm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// ByIDDir is the only place pool devices may be named from: kernel names
// like /dev/nvme0n1 change across boots, by-id links do not (safety rule 3).
const ByIDDir = "/dev/disk/by-id/"

// IsByIDPath says whether path names a device by a stable /dev/disk/by-id/<id>
// link, the only names ssdcache accepts for a device.
func IsByIDPath(path string) bool {
	id, ok := strings.CutPrefix(path, ByIDDir)
	return ok && id != "" && !strings.Contains(id, "/")
}

// ErrDeviceInUse is returned for a device that carries data ssdcache did not put there.
var ErrDeviceInUse = errors.New("device looks in use")

// ErrInvalidDevice is returned for a device path ssdcache may not use.
var ErrInvalidDevice = errors.New("invalid device path")

// PoolConfig names a volume group and the devices it is made of.
type PoolConfig struct {
	VG string
	// Role is recorded as a VG tag so a same-named foreign VG is never used.
	Role string
	// Devices are /dev/disk/by-id paths.
	Devices []string
	// Adopt lists devices the operator explicitly allows to be wiped even
	// though they carry a filesystem, partition table or LVM signature.
	Adopt []string
}

// Pools creates and extends ssdcache's volume groups, refusing devices that
// look in use.
type Pools struct {
	lvm Interface
	dev blockdev.Interface
}

// NewPools returns a pool manager.
func NewPools(l Interface, d blockdev.Interface) *Pools { return &Pools{lvm: l, dev: d} }

// Ensure makes sure cfg.VG exists and holds every device in cfg.Devices.
// It is idempotent: devices already in the VG are left alone.
func (p *Pools) Ensure(ctx context.Context, cfg PoolConfig) (VG, error) {
	if err := ValidatePoolConfig(cfg); err != nil {
		return VG{}, err
	}
	vg, err := p.lvm.GetVG(ctx, cfg.VG)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return VG{}, err
	}
	if exists && !slices.Contains(vg.Tags, PoolTagPrefix+cfg.Role) {
		return VG{}, fmt.Errorf("volume group %s exists but has no tag %s%s: it is not an ssdcache pool; choose another name: %w",
			cfg.VG, PoolTagPrefix, cfg.Role, ErrDeviceInUse)
	}
	fresh, err := p.devicesToAdd(ctx, cfg)
	if err != nil {
		return VG{}, err
	}
	if err := p.apply(ctx, cfg, exists, fresh); err != nil {
		return VG{}, err
	}
	return p.lvm.GetVG(ctx, cfg.VG)
}

func (p *Pools) apply(ctx context.Context, cfg PoolConfig, exists bool, fresh []string) error {
	if len(fresh) == 0 {
		if !exists {
			return fmt.Errorf("volume group %s: no usable device among %v", cfg.VG, cfg.Devices)
		}
		return nil
	}
	klog.InfoS("Adding devices to pool", "vg", cfg.VG, "devices", fresh, "create", !exists)
	if exists {
		return p.lvm.ExtendVG(ctx, cfg.VG, fresh)
	}
	return p.lvm.CreateVG(ctx, cfg.VG, fresh, []string{PoolTagPrefix + cfg.Role})
}

// ValidatePoolConfig checks a pool's configuration without touching any device.
func ValidatePoolConfig(cfg PoolConfig) error {
	if cfg.VG == "" {
		return fmt.Errorf("pool %q: a volume group name is required", cfg.Role)
	}
	if len(cfg.Devices) == 0 {
		return fmt.Errorf("pool %s: no devices configured; name at least one %s<id> path", cfg.VG, ByIDDir)
	}
	seen := map[string]bool{}
	for _, d := range append(slices.Clone(cfg.Devices), cfg.Adopt...) {
		if !IsByIDPath(d) {
			return fmt.Errorf("pool %s: device %q: only stable %s<id> paths are allowed (kernel names change across boots): %w", cfg.VG, d, ByIDDir, ErrInvalidDevice)
		}
	}
	for _, d := range cfg.Devices {
		if seen[d] {
			return fmt.Errorf("pool %s: device %q is listed twice: %w", cfg.VG, d, ErrInvalidDevice)
		}
		seen[d] = true
	}
	for _, a := range cfg.Adopt {
		if !seen[a] {
			return fmt.Errorf("pool %s: adopt device %q is not in the pool's device list: %w", cfg.VG, a, ErrInvalidDevice)
		}
	}
	return nil
}

// devicesToAdd returns the devices not yet in the VG, after checking that
// each is blank or explicitly adopted. All refusals are reported together.
func (p *Pools) devicesToAdd(ctx context.Context, cfg PoolConfig) ([]string, error) {
	pvs, err := p.lvm.ListPVs(ctx)
	if err != nil {
		return nil, err
	}
	// LVM names a PV by whichever alias its device filter accepted (the
	// by-id path under --devices, the kernel name otherwise): compare
	// kernel names.
	pvVG := map[string]string{}
	for _, pv := range pvs {
		name := pv.Name
		if node, err := p.dev.Resolve(pv.Name); err == nil {
			name = node
		}
		pvVG[name] = pv.VG
	}
	var fresh []string
	var refused []error
	for _, d := range cfg.Devices {
		add, err := p.checkDevice(ctx, cfg, d, pvVG)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		if add {
			fresh = append(fresh, d)
		}
	}
	return fresh, errors.Join(refused...)
}

// checkDevice decides whether d must be added (true), is already a member
// (false), or must be refused (error).
func (p *Pools) checkDevice(ctx context.Context, cfg PoolConfig, d string, pvVG map[string]string) (bool, error) {
	node, err := p.dev.Resolve(d)
	if err != nil {
		return false, fmt.Errorf("pool %s: device %s: %w", cfg.VG, d, err)
	}
	if vg, isPV := pvVG[node]; isPV && vg == cfg.VG {
		return false, nil
	} else if isPV && vg != "" {
		return false, fmt.Errorf("pool %s: device %s (%s) belongs to volume group %q; remove it there first: %w", cfg.VG, d, node, vg, ErrDeviceInUse)
	}
	if err := RefuseStacked(p.dev, d, node, "in pool "+cfg.VG); err != nil {
		return false, err
	}
	sigs, err := p.dev.Signatures(ctx, d)
	if err != nil {
		return false, fmt.Errorf("pool %s: device %s: read signatures: %w", cfg.VG, d, err)
	}
	if len(sigs) == 0 {
		return true, nil
	}
	if !slices.Contains(cfg.Adopt, d) {
		return false, fmt.Errorf("pool %s: device %s (%s) carries %s; refusing to use it; to erase it and use it anyway, pass it as an adopt device: %w",
			cfg.VG, d, node, describe(sigs), ErrDeviceInUse)
	}
	klog.InfoS("Wiping adopted device", "vg", cfg.VG, "device", d, "signatures", describe(sigs))
	return true, p.dev.Wipe(ctx, d)
}

// RefuseStacked fails for a device the kernel already uses: a device-mapper
// device (another volume's LV, a dm-crypt mapping) or one with holders
// (device-mapper, md or bcache stacked on it), which no signature may show.
// use says what the device was wanted for ("as a disk", "in pool X"). A
// pool's own member has holders (its LVs): callers ask only about devices
// that are not.
func RefuseStacked(dev blockdev.Interface, path, node, use string) error {
	if strings.HasPrefix(filepath.Base(node), "dm-") {
		return fmt.Errorf("device %s (%s) is a device-mapper device, such as another volume's LV; refusing to use it %s: %w", path, node, use, ErrDeviceInUse)
	}
	holders, err := dev.Holders(node)
	if err != nil {
		return fmt.Errorf("device %s: read holders: %w", path, err)
	}
	if len(holders) > 0 {
		return fmt.Errorf("device %s (%s) is in use by %s; refusing to use it %s: %w", path, node, strings.Join(holders, ", "), use, ErrDeviceInUse)
	}
	return nil
}

func describe(sigs []blockdev.Signature) string {
	parts := make([]string, 0, len(sigs))
	for _, s := range sigs {
		parts = append(parts, fmt.Sprintf("a %s signature at offset %s", s.Type, s.Offset))
	}
	return strings.Join(parts, ", ")
}

// ErrMissingPVInUse is returned when a VG's missing PV cannot be removed
// without losing something: an LV on it that is not a cache LV of ssdcache,
// or a cache LV that a device-mapper table still uses.
var ErrMissingPVInUse = errors.New("refusing to remove the missing PV")

// Reduced is what RemoveMissing removed from a volume group.
type Reduced struct {
	// MissingPVs is how many PVs were missing and are gone from the VG.
	MissingPVs uint64
	// LVs are the cache LVs that had extents on them, and went with them.
	LVs []LV
}

// RemoveMissing removes the missing PVs of vg, the pool of role, with the
// cache LVs on them (vgreduce --removemissing --force): LVM refuses every
// change of a VG that has missing PVs, so a multi-device cache pool with a
// dead device could attach no cache. It does so only when losing those LVs
// loses no data: every one is a cache data or metadata LV of ssdcache (its
// tags say so; caches are writethrough, the origin holds every byte) and no
// device is stacked on it (the kernel lists as holders every device-mapper
// table, live or loaded, that uses it: the monitor dropped those caches to
// linear tables). Otherwise nothing is changed and the error, wrapping
// ErrMissingPVInUse, names the LVs. A VG that does not exist or misses no PV
// is left alone (zero Reduced).
func (p *Pools) RemoveMissing(ctx context.Context, vg, role string) (Reduced, error) {
	g, err := p.lvm.GetVG(ctx, vg)
	if errors.Is(err, ErrNotFound) || (err == nil && g.MissingPVs == 0) {
		return Reduced{}, nil
	}
	if err != nil {
		return Reduced{}, err
	}
	if !slices.Contains(g.Tags, PoolTagPrefix+role) {
		return Reduced{}, fmt.Errorf("volume group %s misses %d PV(s) but has no tag %s%s: not an ssdcache pool, not touching it: %w",
			vg, g.MissingPVs, PoolTagPrefix, role, ErrMissingPVInUse)
	}
	lvs, err := p.lvm.ListLVs(ctx, vg)
	if err != nil {
		return Reduced{}, err
	}
	partial := slices.DeleteFunc(lvs, func(lv LV) bool { return !lv.Partial })
	if err := p.checkDisposable(vg, partial); err != nil {
		return Reduced{}, err
	}
	klog.InfoS("Removing the missing PVs of a cache pool with the cache LVs on them", "vg", vg, "missing", g.MissingPVs, "lvs", Names(partial))
	if err := p.lvm.ReduceMissing(ctx, vg); err != nil {
		return Reduced{}, fmt.Errorf("volume group %s: remove %d missing PV(s): %w", vg, g.MissingPVs, err)
	}
	return Reduced{MissingPVs: g.MissingPVs, LVs: partial}, nil
}

// checkDisposable fails unless every LV on a missing PV may go: an
// ssdcache cache LV (role and volume tags, a name of that volume's) that no
// device is stacked on.
func (p *Pools) checkDisposable(vg string, partial []LV) error {
	var foreign, held []string
	for _, lv := range partial {
		r := lv.Role()
		if (r != RoleCacheData && r != RoleCacheMetadata) || lv.Volume() == "" || !strings.HasPrefix(lv.Name, lv.Volume()+".") {
			foreign = append(foreign, fmt.Sprintf("%s (tags %v)", lv.Name, lv.Tags))
			continue
		}
		if lv.DevNum.IsZero() {
			continue // inactive: no device, so no table can use it
		}
		if why := p.heldBy(lv.Name, lv.Path); why != "" {
			held = append(held, why)
		}
	}
	var errs []error
	if len(foreign) > 0 {
		errs = append(errs, fmt.Errorf("volume group %s: LVs on the missing PV that are not ssdcache cache LVs: %s; remove them by hand if they hold nothing needed: %w",
			vg, strings.Join(foreign, ", "), ErrMissingPVInUse))
	}
	if len(held) > 0 {
		errs = append(errs, fmt.Errorf("volume group %s: cache LVs on the missing PV still in use: %s; their caches must be dropped first: %w",
			vg, strings.Join(held, ", "), ErrMissingPVInUse))
	}
	return errors.Join(errs...)
}

// Names are the names of lvs, for logs and messages.
func Names(lvs []LV) []string {
	names := make([]string, len(lvs))
	for i, lv := range lvs {
		names[i] = lv.Name
	}
	return names
}

// ErrStaleInUse is returned when the devices left of a cache VG LVM no
// longer finds cannot be removed without risk: one ssdcache did not make as
// a cache LV, or one that is open or has a device stacked on it.
var ErrStaleInUse = errors.New("refusing to remove the devices left of a lost volume group")

// The suffixes of the cache LVs ssdcache makes for a volume (pkg/cache
// names them): <volume>.cache-data, .cache-meta and the metadata a
// promotion writes beside it, .cache-meta2. lvm2 reserves "_cmeta" and
// "_cdata", hence the dots.
const (
	CacheDataLVSuffix      = ".cache-data"
	CacheMetadataLVSuffix  = ".cache-meta"
	CacheMetadata2LVSuffix = ".cache-meta2"
)

var cacheLVSuffixes = []string{CacheDataLVSuffix, CacheMetadataLVSuffix, CacheMetadata2LVSuffix}

// CacheLVVolume is the volume whose cache LV is named lv, by ssdcache's
// naming alone; ok is false for any other name.
func CacheLVVolume(lv string) (volume string, ok bool) {
	for _, s := range cacheLVSuffixes {
		if v, found := strings.CutSuffix(lv, s); found && v != "" {
			return v, true
		}
	}
	return "", false
}

// Stale is what RemoveStale removed.
type Stale struct {
	// Devices are the device-mapper devices of the lost VG's cache LVs.
	Devices []KernelLV
}

// Volumes are the volumes whose cache LVs' devices went, in order.
func (s Stale) Volumes() []string {
	var vols []string
	for _, d := range s.Devices {
		if v, _ := CacheLVVolume(d.LV); !slices.Contains(vols, v) {
			vols = append(vols, v)
		}
	}
	return vols
}

// RemoveStale removes the device-mapper devices the kernel keeps of cache
// VG vg after LVM stopped finding it: a cache pool on one device whose
// device died leaves no PV, so no VG, and no lvm command can deactivate its
// LVs; their devices, named <vg>-<lv>, would make every new cache LV of the
// same volume fail to activate once the pool is made again on a new device.
// It acts only while LVM does not find vg (role's tag cannot be read then:
// the name is the pool's) and only when every such device is provably a
// cache LV of ssdcache that nothing uses: named as one (CacheLVVolume),
// made by LVM (an LV UUID, one VG's for all of them), not open and with no
// device stacked on it (the monitor dropped those caches to linear tables).
// Otherwise it removes nothing and the error, wrapping ErrStaleInUse, names
// the devices. A VG LVM finds, or no device, is left alone (zero Stale).
func (p *Pools) RemoveStale(ctx context.Context, vg, role string) (Stale, error) {
	_, err := p.lvm.GetVG(ctx, vg)
	if err == nil {
		return Stale{}, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Stale{}, err
	}
	devs, err := p.lvm.KernelLVs(ctx, vg)
	if err != nil || len(devs) == 0 {
		return Stale{}, err
	}
	if err := p.checkStale(vg, role, devs); err != nil {
		return Stale{}, err
	}
	klog.InfoS("Removing the devices left of the cache LVs of a cache pool LVM no longer finds", "vg", vg, "devices", deviceNames(devs))
	var removed Stale
	for _, d := range devs {
		if err := p.lvm.RemoveKernelLV(ctx, d); err != nil {
			return removed, fmt.Errorf("volume group %s (not found by LVM): remove the device %s of its cache LV %s: %w", vg, d.Device, d.LV, err)
		}
		removed.Devices = append(removed.Devices, d)
	}
	return removed, nil
}

// checkStale fails unless every device may go.
func (p *Pools) checkStale(vg, role string, devs []KernelLV) error {
	var foreign, held []string
	vgUUID := devs[0].VGUUID()
	for _, d := range devs {
		if _, ok := CacheLVVolume(d.LV); !ok || d.VGUUID() == "" || d.VGUUID() != vgUUID {
			foreign = append(foreign, fmt.Sprintf("%s (LV %s, uuid %q)", d.Device, d.LV, d.UUID))
			continue
		}
		if d.OpenCount > 0 {
			held = append(held, fmt.Sprintf("%s (open %d times)", d.Device, d.OpenCount))
			continue
		}
		if why := p.heldBy(d.Device, dm.DevicePath(d.Device)); why != "" {
			held = append(held, why)
		}
	}
	var errs []error
	if len(foreign) > 0 {
		errs = append(errs, fmt.Errorf("%s pool %s is not found by LVM, and the kernel holds devices named as its LVs that are not the cache LVs of one ssdcache VG: %s; "+
			"remove them by hand (dmsetup remove) if they hold nothing needed: %w", role, vg, strings.Join(foreign, ", "), ErrStaleInUse))
	}
	if len(held) > 0 {
		errs = append(errs, fmt.Errorf("%s pool %s is not found by LVM, and devices of its cache LVs are still in use: %s; their caches must be dropped first: %w",
			role, vg, strings.Join(held, ", "), ErrStaleInUse))
	}
	return errors.Join(errs...)
}

// heldBy says why the device at path, called name, may not go: the devices
// stacked on it, or the error reading them (unproven is not unused); ""
// when nothing holds it.
func (p *Pools) heldBy(name, path string) string {
	holders, err := p.dev.Holders(path)
	switch {
	case err != nil:
		return fmt.Sprintf("%s (reading its holders: %v)", name, err)
	case len(holders) > 0:
		return fmt.Sprintf("%s (used by %s)", name, strings.Join(holders, ", "))
	}
	return ""
}

// DeviceNames are the device-mapper names of the devices that went.
func (s Stale) DeviceNames() []string { return deviceNames(s.Devices) }

func deviceNames(devs []KernelLV) []string {
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Device
	}
	return names
}
