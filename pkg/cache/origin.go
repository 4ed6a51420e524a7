package cache

import (
	"context"
	"fmt"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// Origin is the device that holds a volume's data.
type Origin struct {
	Path   string
	DevNum dm.DevNum
	Bytes  uint64
}

// OriginLV returns the origin of a volume provisioned in the HDD pool.
func (e *Engine) OriginLV(ctx context.Context, volumeID string) (Origin, error) {
	if err := ValidateVolumeID(volumeID); err != nil {
		return Origin{}, err
	}
	lv, err := lvm.FindLV(ctx, e.lvm, e.Pools().OriginVG, volumeID)
	if err != nil {
		return Origin{}, err
	}
	if lv.Volume() != volumeID || lv.Role() != lvm.RoleOrigin {
		return Origin{}, fmt.Errorf("LV %s/%s is not tagged as the origin of volume %s: %w", lv.VG, lv.Name, volumeID, lvm.ErrDeviceInUse)
	}
	if lv.DevNum.IsZero() {
		if err := e.lvm.ActivateLV(ctx, lv.VG, lv.Name); err != nil {
			return Origin{}, fmt.Errorf("activate origin of volume %s: %w", volumeID, err)
		}
		if lv, err = lvm.FindLV(ctx, e.lvm, e.Pools().OriginVG, volumeID); err != nil {
			return Origin{}, err
		}
	}
	return Origin{Path: lv.Path, DevNum: lv.DevNum, Bytes: lv.Size}, nil
}

// OriginDisk returns the origin of a static volume over an existing disk
// (the StoreMI case). Only /dev/disk/by-id paths of whole, unused disks are
// accepted (safety rule 3); nothing is written. Refused: a device-mapper
// device (a dm-name link to another volume's origin LV would put two caches
// over one origin: stale reads, double mounts), a device others are stacked
// on, and an LVM physical volume (one of the node's pools, or someone else's
// volume group).
func (e *Engine) OriginDisk(ctx context.Context, path string) (Origin, error) {
	if !lvm.IsByIDPath(path) {
		return Origin{}, fmt.Errorf("device %q: only stable %s<id> paths are allowed: %w", path, lvm.ByIDDir, lvm.ErrInvalidDevice)
	}
	node, err := e.dev.Resolve(path)
	if err != nil {
		return Origin{}, fmt.Errorf("device %s: %w: %w", path, err, lvm.ErrNotFound)
	}
	if err := e.refuseDiskInUse(ctx, path, node); err != nil {
		return Origin{}, err
	}
	num, err := e.dev.DevNum(node)
	if err != nil {
		return Origin{}, err
	}
	size, err := e.dev.Size(ctx, node)
	if err != nil {
		return Origin{}, err
	}
	return Origin{Path: path, DevNum: num, Bytes: size}, nil
}

// refuseDiskInUse fails for a disk that device-mapper, another stacked
// driver or LVM already uses. LVM is asked through the device's own
// signature, not a PV scan: the node's LVM reads only its pool devices.
func (e *Engine) refuseDiskInUse(ctx context.Context, path, node string) error {
	if err := lvm.RefuseStacked(e.dev, path, node, "as a disk (only whole disks nobody uses can be static volumes)"); err != nil {
		return err
	}
	sigs, err := e.dev.Signatures(ctx, node)
	if err != nil {
		return fmt.Errorf("device %s: read signatures: %w", path, err)
	}
	for _, s := range sigs {
		if s.Type == blockdev.LVMMember {
			return fmt.Errorf("device %s (%s) is an LVM physical volume; refusing to use it as a disk: %w", path, node, lvm.ErrDeviceInUse)
		}
	}
	return nil
}
