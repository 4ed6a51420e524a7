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
	// Cached is true for ssdcache.io/cache-mode: ReadCache.
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
		mode, ok := canonical(value, cacheModes)
		if !ok {
			return fmt.Errorf("parameter %s: %q is not allowed; allowed values are %s", key, value, strings.Join(cacheModes, ", "))
		}
		p.Cached = mode == CacheModeReadCache
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
		policy, ok := canonical(value, warmupPolicies)
		if !ok {
			return fmt.Errorf("parameter %s: %q is not allowed; allowed values are %s", key, value, strings.Join(warmupPolicies, ", "))
		}
		p.Warmup = WarmupPolicy(policy)
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

// The values of the parameters with a fixed set, spelled as the CRD spells
// them. Any other case is accepted and deprecated (DeprecatedSpellings): the
// lowercase spellings are those of releases before 0.2.
var (
	cacheModes     = []string{CacheModeReadCache, CacheModeNone}
	warmupPolicies = []string{string(WarmupHotSet), string(WarmupNone)}
)

// canonical is the allowed value that value spells in any case.
func canonical(value string, allowed []string) (string, bool) {
	i := slices.IndexFunc(allowed, func(a string) bool { return strings.EqualFold(value, a) })
	if i < 0 {
		return "", false
	}
	return allowed[i], true
}

// DeprecatedSpellings lists, one sentence each, the parameters that parse
// but in a spelling other than the CRD's (`readcache` for `ReadCache`,
// `hotset` for `HotSet`), for the caller to warn about; sorted by parameter.
func DeprecatedSpellings(params map[string]string) []string {
	var notes []string
	for _, key := range []string{ParamCacheMode, ParamWarmup} {
		allowed := map[string][]string{ParamCacheMode: cacheModes, ParamWarmup: warmupPolicies}[key]
		value, set := params[key]
		if want, ok := canonical(value, allowed); set && ok && value != want {
			notes = append(notes, fmt.Sprintf("parameter %s: %q is deprecated, write %q (the CRD's spelling); the old spelling is still accepted", key, value, want))
		}
	}
	return notes
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

// The cache modes as volume contexts spell them. A PV outlives a release:
// node plugins before 0.2 accept only these lowercase spellings, so a PV
// written with ReadCache could not be staged after a rollback. Switch to
// CacheModeReadCache once no supported release predates 0.2.
const (
	volumeContextReadCache = "readcache"
	volumeContextNone      = "none"
)

// VolumeContext is what CreateVolume hands to NodeStage through the PV: the
// parameters again, in canonical form (the cache mode in the spelling every
// release reads, see volumeContextReadCache).
func (p CacheParameters) VolumeContext() map[string]string {
	if !p.Cached {
		return map[string]string{ParamCacheMode: volumeContextNone}
	}
	ctx := map[string]string{ParamCacheMode: volumeContextReadCache, ParamCacheSize: p.Size.String()}
	if p.DeviceClass != "" {
		ctx[ParamDeviceClass] = p.DeviceClass
	}
	if p.Warmup != "" {
		ctx[ParamWarmup] = string(p.Warmup)
	}
	return ctx
}
