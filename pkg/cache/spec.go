package cache

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// Sentinel errors, turned into gRPC codes only at the CSI boundary.
var (
	// ErrInvalid marks bad input: a malformed volume ID or cache spec.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotStaged is returned for operations on a volume that has no dm device.
	ErrNotStaged = errors.New("volume is not staged")
	// ErrOriginMismatch is returned when the dm device maps another origin
	// than the one the volume should have.
	ErrOriginMismatch = errors.New("staged device maps a different origin")
	// ErrUnknownClass is returned for a device class this node has no pool for.
	ErrUnknownClass = errors.New("unknown cache device class")
	// ErrCacheLeftOut is returned when an operation swapped a live cache out
	// for a linear table and could not load it back (its device failed): the
	// volume serves from its origin, as after a drop.
	ErrCacheLeftOut = errors.New("the cache could not be loaded again; the volume serves from its origin")
	// ErrCacheChanged is returned by DropCache when the volume's table is no
	// longer the one its cache was seen failing in: a change replaced or
	// removed that cache meanwhile, and the new one is not known to fail.
	ErrCacheChanged = errors.New("the volume's table changed since its cache was seen failing")
)

// Mode is what the cache does for reads.
type Mode string

const (
	// ModeReadCache caches reads; writes complete on the origin (writethrough).
	ModeReadCache Mode = "ReadCache"
	// ModePaused keeps the cache's LVs, and the hot set of what they held, but
	// serves every I/O from the origin on a linear table. Resuming loads a new
	// cache filled from the hot set. It does not use dm-cache's passthrough
	// mode, whose write path had bugs until cache target 2.4.0.
	ModePaused Mode = "Paused"
)

func (m Mode) validate() error {
	if m != ModeReadCache && m != ModePaused {
		return fmt.Errorf("cache mode %q: allowed values are %q and %q: %w", m, ModeReadCache, ModePaused, ErrInvalid)
	}
	return nil
}

// Spec is the cache a volume should have.
type Spec struct {
	// SizeBytes is the size of the cache data device.
	SizeBytes uint64
	Mode      Mode
	// Class names the NVMe pool to carve the cache from; "" means the default.
	Class string
	// Warm fills a new cache from the volume's hot set before it goes live,
	// at most WarmLimitBytes of it when that is set, and promotes the blocks
	// read in batches (promote.go). Neither causes a cache to be recreated.
	Warm           bool
	WarmLimitBytes uint64
	// Owner names what asked for the cache (a CacheBinding, as
	// <namespace>/<name>/<uid>); it is tagged on the cache LVs when they are
	// created and read back, and never causes a cache to be recreated.
	Owner string
}

// MinCacheBytes is the smallest cache worth having: a cache below one LVM
// extent and a few hundred blocks only costs latency.
const MinCacheBytes = 16 << 20

// Validate checks a spec without touching the node.
func (s Spec) Validate() error {
	if s.SizeBytes < MinCacheBytes {
		return fmt.Errorf("cache size %d bytes: must be at least %d bytes (16Mi): %w", s.SizeBytes, MinCacheBytes, ErrInvalid)
	}
	return s.Mode.validate()
}

// volumeIDPattern keeps IDs usable as dm names, LV names and LVM tags.
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]{0,95}$`)

// lvmReservedPrefixes and lvmReservedParts are what lvm2 refuses in an LV
// name (lib/misc/lvm-string.c): names of its own hidden sub-LVs.
var (
	lvmReservedPrefixes = []string{"snapshot", "pvmove"}
	lvmReservedParts    = []string{"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_wcorig", "_mlog", "_mimage",
		"_pmspare", "_rimage", "_rmeta", "_tdata", "_tmeta", "_vdata", "_vorigin", "_imeta", "_iorig"}
)

// maxEscapedIDLen keeps the LVs' dm names within the kernel's 127 characters:
// LVM names an LV's device <vg>-<lv> with every '-' doubled, and the longest
// is the cache metadata LV in the default cache VG,
// "ssdcache--nvme-" + id + ".cache--meta".
const maxEscapedIDLen = 127 - len("ssdcache--nvme-") - len(".cache--meta")

// ValidateVolumeID checks that id can name a dm device, an LV and an LVM tag.
func ValidateVolumeID(id string) error {
	if !volumeIDPattern.MatchString(id) {
		return fmt.Errorf("volume ID %q: must be 1-96 characters of letters, digits, '_', '.', '+' or '-', starting with a letter or digit: %w", id, ErrInvalid)
	}
	for _, p := range lvmReservedPrefixes {
		if strings.HasPrefix(id, p) {
			return fmt.Errorf("volume ID %q: LVM reserves names starting with %q: %w", id, p, ErrInvalid)
		}
	}
	for _, part := range lvmReservedParts {
		if strings.Contains(id, part) {
			return fmt.Errorf("volume ID %q: LVM reserves names containing %q: %w", id, part, ErrInvalid)
		}
	}
	if n := len(id) + strings.Count(id, "-"); n > maxEscapedIDLen {
		return fmt.Errorf("volume ID %q: %d characters once LVM doubles its hyphens, at most %d fit a dm name: %w", id, n, maxEscapedIDLen, ErrInvalid)
	}
	return nil
}

// DevicePrefix starts the name of every dm device ssdcache owns.
const DevicePrefix = "ssdcache-"

// DeviceName is the dm device of a staged volume.
func DeviceName(volumeID string) string { return DevicePrefix + volumeID }

// DevicePath is the node of a staged volume's dm device.
func DevicePath(volumeID string) string { return dm.DevicePath(DeviceName(volumeID)) }

// Cache LV names (lvm.CacheLVVolume reads them back).
func metadataLVName(volumeID string) string { return volumeID + lvm.CacheMetadataLVSuffix }
func dataLVName(volumeID string) string     { return volumeID + lvm.CacheDataLVSuffix }

// nextMetadataLVName is the name of the metadata LV a promotion writes
// beside the live one, current (swapMetadata): the two names alternate.
func nextMetadataLVName(volumeID, current string) string {
	if current == metadataLVName(volumeID) {
		return volumeID + lvm.CacheMetadata2LVSuffix
	}
	return metadataLVName(volumeID)
}
