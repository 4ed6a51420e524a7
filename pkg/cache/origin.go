package cache

import (
	"context"
	"fmt"
	"strings"

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
	lv, err := lvm.FindLV(ctx, e.lvm, e.pools.OriginVG, volumeID)
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
		if lv, err = lvm.FindLV(ctx, e.lvm, e.pools.OriginVG, volumeID); err != nil {
			return Origin{}, err
		}
	}
	return Origin{Path: lv.Path, DevNum: lv.DevNum, Bytes: lv.Size}, nil
}

// OriginDisk returns the origin of a static volume over an existing disk
// (the StoreMI case). Only /dev/disk/by-id paths are accepted, and never a
// device that is an LVM physical volume: that would be one of the node's
// pools, or someone else's volume group (safety rule 3). Nothing is written.
func (e *Engine) OriginDisk(ctx context.Context, path string) (Origin, error) {
	if !strings.HasPrefix(path, lvm.ByIDDir) || len(path) == len(lvm.ByIDDir) || strings.Contains(path[len(lvm.ByIDDir):], "/") {
		return Origin{}, fmt.Errorf("device %q: only stable %s<id> paths are allowed: %w", path, lvm.ByIDDir, lvm.ErrInvalidDevice)
	}
	node, err := e.dev.Resolve(path)
	if err != nil {
		return Origin{}, fmt.Errorf("device %s: %w: %w", path, err, lvm.ErrNotFound)
	}
	pvs, err := e.lvm.ListPVs(ctx)
	if err != nil {
		return Origin{}, err
	}
	for _, pv := range pvs {
		if pv.Name == node {
			return Origin{}, fmt.Errorf("device %s (%s) is an LVM physical volume of volume group %q; refusing to use it as a disk: %w", path, node, pv.VG, lvm.ErrDeviceInUse)
		}
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
