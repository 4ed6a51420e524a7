package csi

import (
	"fmt"
	"sync"

	"k8s.io/klog/v2"

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

const defaultFSType = "ext4"

// The PVC of a volume, as csi-provisioner's --extra-create-metadata passes it
// to CreateVolume, which copies it into the volume context under the same
// keys: NodeStage then knows whose volume it stages, for the metrics' labels.
const (
	ContextPVCName      = "csi.storage.k8s.io/pvc/name"
	ContextPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
)

// volumeContext is what CreateVolume returns: the parameters in canonical
// form and the PVC's name and namespace when the provisioner passed them.
func volumeContext(p volumeParams, createParams map[string]string) map[string]string {
	ctx := p.VolumeContext()
	for _, key := range []string{ContextPVCName, ContextPVCNamespace} {
		if v := createParams[key]; v != "" {
			ctx[key] = v
		}
	}
	return ctx
}

// PVCOf is the namespace and name of the PVC a volume context names; empty
// for a volume created without the provisioner's PVC metadata or a static one.
func PVCOf(volumeContext map[string]string) (namespace, name string) {
	return volumeContext[ContextPVCNamespace], volumeContext[ContextPVCName]
}

// volumeParams are the ssdcache parameters of a volume: a StorageClass's at
// CreateVolume, a volume context's at NodeStage, which may also name a device.
type volumeParams struct {
	v1alpha1.CacheParameters
	// device is set for static volumes over an existing disk.
	device string
	// format allows creating a filesystem on a static volume's blank disk.
	format bool
}

// onceLog logs each message once per process: a CSI response cannot carry a
// warning, and the provisioner asks GetCapacity of every class over and over.
type onceLog struct {
	seen sync.Map
	log  func(msg string)
}

func (o *onceLog) warn(msgs []string) {
	for _, m := range msgs {
		if _, dup := o.seen.LoadOrStore(m, true); !dup {
			o.log(m)
		}
	}
}

// spellingWarnings logs StorageClass parameters in deprecated spellings
// (README, "StorageClass parameters"); the claim controller also puts them on
// each claim as an Event.
var spellingWarnings = &onceLog{log: func(msg string) { klog.Warning("StorageClass ", msg) }}

// parseParams validates parameters with the API's one parser; only a volume
// context (allowDevice) may add the static volume's attributes.
func parseParams(params map[string]string, allowDevice bool) (volumeParams, error) {
	var p volumeParams
	var err error
	if p.CacheParameters, err = v1alpha1.ParseCacheParameters(params, ContextDevice, ContextFormat); err != nil {
		return volumeParams{}, err
	}
	if !allowDevice {
		// A StorageClass's; a volume context keeps the old spellings on purpose.
		spellingWarnings.warn(v1alpha1.DeprecatedSpellings(params))
	}
	for _, key := range []string{ContextDevice, ContextFormat} {
		value, set := params[key]
		if !set {
			continue
		}
		if !allowDevice {
			return volumeParams{}, fmt.Errorf("parameter %s: only a static PersistentVolume's volumeAttributes may set it", key)
		}
		if err := p.setStatic(key, value); err != nil {
			return volumeParams{}, err
		}
	}
	return p, nil
}

func (p *volumeParams) setStatic(key, value string) error {
	switch key {
	case ContextDevice:
		if !lvm.IsByIDPath(value) {
			return fmt.Errorf("volume attribute %s=%q: only stable %s<id> paths are allowed", key, value, lvm.ByIDDir)
		}
		p.device = value
	case ContextFormat:
		if value != "true" && value != "false" {
			return fmt.Errorf("volume attribute %s=%q: allowed values are true, false", key, value)
		}
		p.format = value == "true"
	}
	return nil
}

// CacheSpecFromContext is the cache a volume context asks for, for a volume
// of volumeBytes; nil when uncached. Without the node agent (standalone
// mode) the node plugin attaches it at NodeStage; with the agent the
// volume's CacheBinding decides and the volume context is not read for it.
func CacheSpecFromContext(volumeContext map[string]string, volumeBytes int64) (*cache.Spec, error) {
	p, err := parseParams(volumeContext, true)
	if err != nil {
		return nil, fmt.Errorf("volume_context: %w: %w", err, cache.ErrInvalid)
	}
	return p.cacheSpec(volumeBytes)
}

// cacheSpec resolves the cache of a volume of volumeBytes; nil when uncached.
func (p volumeParams) cacheSpec(volumeBytes int64) (*cache.Spec, error) {
	if !p.Cached {
		return nil, nil
	}
	size, _, err := p.Size.ResolveCapped(volumeBytes)
	if err != nil {
		return nil, fmt.Errorf("parameter %s=%q: %w: %w", v1alpha1.ParamCacheSize, p.Size, err, cache.ErrInvalid)
	}
	return &cache.Spec{SizeBytes: uint64(size), Mode: cache.ModeReadCache, Class: p.DeviceClass,
		Warm: p.Warmup != v1alpha1.WarmupNone}, nil
}
