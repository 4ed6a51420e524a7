package v1alpha1

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// FSTypes are the filesystems a volume may be formatted with; the first is the default.
var FSTypes = []string{"ext4", "xfs"}

// deviceClassName is the CRD's pattern for CacheBindingSpec.DeviceClass.
var deviceClassName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// CacheParameters are a StorageClass's ssdcache parameters, parsed. The CSI
// controller, the claim controller and (through the binding they make) the node
// agent all read a class through ParseCacheParameters, so they cannot disagree.
type CacheParameters struct {
	// Cached is true for ssdcache.io/cache-mode: readcache.
	Cached bool
	// Size is the cache per volume (DefaultCacheSize when the class sets none);
	// zero when not Cached.
	Size CacheSize
	// DeviceClass is the cache device class; empty for the node's default.
	DeviceClass string
	// Warmup is the warm-up policy of the class's bindings.
	Warmup WarmupPolicy
	// FSType is the filesystem of filesystem volumes; empty for the default.
	FSType string
}

// ParseCacheParameters validates StorageClass parameters (or a volume context
// made from them). Unknown ssdcache.io/ keys are refused, so that a typo never
// silently yields an uncached volume; extraKeys are ssdcache.io/ keys the
// caller handles itself (a static volume's device). Errors name the parameter,
// its value and what is allowed.
func ParseCacheParameters(params map[string]string, extraKeys ...string) (CacheParameters, error) {
	var p CacheParameters
	// Sorted, so that of several bad parameters the same one is reported every time.
	for _, key := range slices.Sorted(maps.Keys(params)) {
		if err := p.set(key, params[key], extraKeys); err != nil {
			return CacheParameters{}, err
		}
	}
	if !p.Cached {
		for _, key := range []string{ParamCacheSize, ParamDeviceClass} {
			if value, set := params[key]; set {
				return CacheParameters{}, fmt.Errorf("parameter %s=%q needs %s=%s (it is %q); leave it out of a class without a cache",
					key, value, ParamCacheMode, CacheModeReadCache, params[ParamCacheMode])
			}
		}
	}
	if p.Cached && p.Size == (CacheSize{}) {
		p.Size, _ = ParseCacheSize(DefaultCacheSize)
	}
	if p.Cached && p.Warmup == "" {
		p.Warmup = WarmupHotSet
	}
	return p, nil
}

func (p *CacheParameters) set(key, value string, extraKeys []string) error {
	var err error
	switch key {
	case ParamCacheMode:
		allowed := []string{CacheModeReadCache, CacheModeNone}
		if !slices.Contains(allowed, value) {
			return fmt.Errorf("parameter %s: %q is not allowed; allowed values are %s", key, value, strings.Join(allowed, ", "))
		}
		p.Cached = value == CacheModeReadCache
	case ParamCacheSize:
		if p.Size, err = ParseCacheSize(value); err != nil {
			return fmt.Errorf("parameter %s: %w", key, err)
		}
	case ParamDeviceClass:
		if !deviceClassName.MatchString(value) || len(value) > 63 {
			return fmt.Errorf("parameter %s: %q is not a device class name (lowercase letters, digits and '-', at most 63 characters); leave the parameter out for the node's default class", key, value)
		}
		p.DeviceClass = value
	case ParamWarmup:
		i := slices.IndexFunc(WarmupPolicies, func(w WarmupPolicy) bool { return strings.EqualFold(value, string(w)) })
		if i < 0 {
			return fmt.Errorf("parameter %s: %q is not allowed; allowed values are %s and %s (any case)", key, value, WarmupHotSet, WarmupNone)
		}
		p.Warmup = WarmupPolicies[i]
	case ParamFSType:
		if !slices.Contains(FSTypes, value) {
			return fmt.Errorf("parameter %s: %q is not allowed; allowed values are %s", key, value, strings.Join(FSTypes, ", "))
		}
		p.FSType = value
	default:
		if strings.HasPrefix(key, DriverName+"/") && !slices.Contains(extraKeys, key) {
			return fmt.Errorf("parameter %q is unknown; allowed are %s, %s, %s, %s", key,
				ParamCacheMode, ParamCacheSize, ParamDeviceClass, ParamWarmup)
		}
	}
	return nil
}

// BindingSpec is the binding a PVC of a class with these parameters gets; nil
// when the class asks for no cache.
func (p CacheParameters) BindingSpec(pvcName string) *CacheBindingSpec {
	if !p.Cached {
		return nil
	}
	return &CacheBindingSpec{PVCName: pvcName, Size: p.Size.String(), Mode: ModeReadCache,
		DeviceClass: p.DeviceClass, Warmup: p.Warmup}
}

// VolumeContext is what CreateVolume hands to NodeStage through the PV: the
// parameters again, in canonical form.
func (p CacheParameters) VolumeContext() map[string]string {
	if !p.Cached {
		return map[string]string{ParamCacheMode: CacheModeNone}
	}
	ctx := map[string]string{ParamCacheMode: CacheModeReadCache, ParamCacheSize: p.Size.String()}
	if p.DeviceClass != "" {
		ctx[ParamDeviceClass] = p.DeviceClass
	}
	if p.Warmup != "" {
		ctx[ParamWarmup] = string(p.Warmup)
	}
	return ctx
}
