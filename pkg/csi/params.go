package csi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// ContextDevice is the volume attribute of a static PV that puts ssdcache in
// front of an existing disk: a /dev/disk/by-id path.
const ContextDevice = "ssdcache.io/device"

// ContextFormat ("true") lets NodeStage create a filesystem on a static
// volume's disk that holds none. Without it such a disk is refused: blkid
// recognises no raw database or dm-crypt volume, and formatting would erase it.
const ContextFormat = "ssdcache.io/format"

// Supported filesystems.
var fsTypes = []string{"ext4", "xfs"}

const defaultFSType = "ext4"

// volumeParams are the ssdcache parameters of a volume, from StorageClass
// parameters at CreateVolume and from the volume context at NodeStage.
type volumeParams struct {
	cached bool
	size   v1alpha1.CacheSize
	class  string
	// device is set for static volumes over an existing disk.
	device string
	// format allows creating a filesystem on a static volume's blank disk.
	format bool
}

// parseParams validates StorageClass parameters (or a volume context, which
// may also name a device). Unknown ssdcache.io keys are refused, so a typo
// never silently yields an uncached volume.
func parseParams(params map[string]string, allowDevice bool) (volumeParams, error) {
	var p volumeParams
	for key, value := range params {
		if err := p.set(key, value, allowDevice); err != nil {
			return volumeParams{}, err
		}
	}
	if !p.cached && (params[v1alpha1.ParamCacheSize] != "" || params[v1alpha1.ParamDeviceClass] != "") {
		return volumeParams{}, fmt.Errorf("parameter %s=%q: cache size and device class need %s=%s",
			v1alpha1.ParamCacheSize, params[v1alpha1.ParamCacheSize], v1alpha1.ParamCacheMode, v1alpha1.CacheModeReadCache)
	}
	if p.cached && p.size == (v1alpha1.CacheSize{}) {
		p.size, _ = v1alpha1.ParseCacheSize(v1alpha1.DefaultCacheSize)
	}
	return p, nil
}

func (p *volumeParams) set(key, value string, allowDevice bool) error {
	switch key {
	case v1alpha1.ParamCacheMode:
		allowed := []string{v1alpha1.CacheModeReadCache, v1alpha1.CacheModeNone}
		if !slices.Contains(allowed, value) {
			return fmt.Errorf("parameter %s=%q: allowed values are %s", key, value, strings.Join(allowed, ", "))
		}
		p.cached = value == v1alpha1.CacheModeReadCache
	case v1alpha1.ParamCacheSize:
		size, err := v1alpha1.ParseCacheSize(value)
		if err != nil {
			return fmt.Errorf("parameter %s: %w", key, err)
		}
		p.size = size
	case v1alpha1.ParamDeviceClass:
		if value == "" {
			return fmt.Errorf("parameter %s is empty: name a cache device class of the node, or leave the parameter out for the default", key)
		}
		p.class = value
	case v1alpha1.ParamWarmup:
		if value != "none" {
			return fmt.Errorf("parameter %s=%q: allowed values are none (warm start is not available yet)", key, value)
		}
	case v1alpha1.ParamFSType:
		if !slices.Contains(fsTypes, value) {
			return fmt.Errorf("parameter %s=%q: allowed values are %s", key, value, strings.Join(fsTypes, ", "))
		}
	case ContextDevice:
		if !allowDevice {
			return fmt.Errorf("parameter %s: only a static PersistentVolume's volumeAttributes may name a device", key)
		}
		if !strings.HasPrefix(value, lvm.ByIDDir) || len(value) == len(lvm.ByIDDir) || strings.Contains(value[len(lvm.ByIDDir):], "/") {
			return fmt.Errorf("volume attribute %s=%q: only stable %s<id> paths are allowed", key, value, lvm.ByIDDir)
		}
		p.device = value
	case ContextFormat:
		if !allowDevice {
			return fmt.Errorf("parameter %s: only a static PersistentVolume's volumeAttributes may ask to format its disk", key)
		}
		if value != "true" && value != "false" {
			return fmt.Errorf("volume attribute %s=%q: allowed values are true, false", key, value)
		}
		p.format = value == "true"
	default:
		if strings.HasPrefix(key, "ssdcache.io/") {
			return fmt.Errorf("parameter %q is unknown: allowed are %s, %s, %s, %s", key,
				v1alpha1.ParamCacheMode, v1alpha1.ParamCacheSize, v1alpha1.ParamDeviceClass, v1alpha1.ParamWarmup)
		}
	}
	return nil
}

// volumeContext is what CreateVolume hands to NodeStage through the PV.
func (p volumeParams) volumeContext() map[string]string {
	if !p.cached {
		return map[string]string{v1alpha1.ParamCacheMode: v1alpha1.CacheModeNone}
	}
	ctx := map[string]string{v1alpha1.ParamCacheMode: v1alpha1.CacheModeReadCache, v1alpha1.ParamCacheSize: p.size.String()}
	if p.class != "" {
		ctx[v1alpha1.ParamDeviceClass] = p.class
	}
	return ctx
}

// cacheSpec resolves the cache of a volume of volumeBytes; nil when uncached.
func (p volumeParams) cacheSpec(volumeBytes int64) (*cache.Spec, error) {
	if !p.cached {
		return nil, nil
	}
	size, _, err := p.size.ResolveCapped(volumeBytes)
	if err != nil {
		return nil, fmt.Errorf("parameter %s=%q: %w: %w", v1alpha1.ParamCacheSize, p.size, err, cache.ErrInvalid)
	}
	return &cache.Spec{SizeBytes: uint64(size), Mode: cache.ModeReadCache, Class: p.class}, nil
}
