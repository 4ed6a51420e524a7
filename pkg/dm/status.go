package dm

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotCacheTarget is ParseCacheStatus's error for the status line of
// another target: the device's table is not (or no longer) a cache.
var ErrNotCacheTarget = errors.New("not a cache target")

// CacheHealth summarises whether a dm-cache device can still be trusted.
type CacheHealth string

const (
	// CacheHealthy: metadata read-write and no check requested.
	CacheHealthy CacheHealth = "Healthy"
	// CacheReadOnly: metadata fell back to read-only after an error.
	CacheReadOnly CacheHealth = "ReadOnly"
	// CacheNeedsCheck: the kernel flagged the metadata for cache_check.
	CacheNeedsCheck CacheHealth = "NeedsCheck"
	// CacheFailed: the status line is just "Fail" (metadata failed).
	CacheFailed CacheHealth = "Fail"
	// CacheError: the kernel could not read its own counters ("Error").
	CacheError CacheHealth = "Error"
)

// CacheStatus is every field of a dm-cache status line. Counters are the
// kernel's 32-bit values (they wrap and survive suspend); use Delta32.
type CacheStatus struct {
	Length uint64 // sectors, from the status line prefix

	MetadataBlockSectors uint64
	MetadataUsed         uint64
	MetadataTotal        uint64
	BlockSectors         uint64
	CacheUsed            uint64
	CacheTotal           uint64
	ReadHits             uint64
	ReadMisses           uint64
	WriteHits            uint64
	WriteMisses          uint64
	Demotions            uint64
	Promotions           uint64
	Dirty                uint64

	Mode          CacheMode
	ExtraFeatures []string
	// CoreArgs holds the key/value core arguments, e.g. migration_threshold.
	CoreArgs   map[string]string
	Policy     string
	PolicyArgs []string
	ReadOnly   bool
	NeedsCheck bool
	// Failed is set when the line is "Fail" or "Error"; no other field is then valid.
	Failed bool
	Health CacheHealth
}

// ParseCacheStatus parses one line of `dmsetup status` for a cache target:
// "<start> <length> cache <fields...>".
func ParseCacheStatus(line string) (CacheStatus, error) {
	fields := strings.Fields(line)
	if len(fields) > 2 && fields[2] != "cache" {
		return CacheStatus{}, fmt.Errorf("cache status %q: want <start> <length> cache <fields>: %w", line, ErrNotCacheTarget)
	}
	if len(fields) < 4 {
		return CacheStatus{}, fmt.Errorf("cache status %q: want <start> <length> cache <fields>", line)
	}
	prefix := scanner{fields: fields[:2], what: "cache status"}
	prefix.uint("start")
	length := prefix.uint("length")
	if prefix.err != nil {
		return CacheStatus{}, prefix.err
	}
	body := fields[3:]
	if len(body) == 1 && (body[0] == "Fail" || body[0] == "Error") {
		return CacheStatus{Length: length, Failed: true, Health: CacheHealth(body[0])}, nil
	}
	st, err := parseCacheStatusBody(body)
	if err != nil {
		return CacheStatus{}, fmt.Errorf("cache status %q: %w", line, err)
	}
	st.Length = length
	return st, nil
}

func parseCacheStatusBody(fields []string) (CacheStatus, error) {
	s := scanner{fields: fields, what: "cache status"}
	var st CacheStatus
	st.MetadataBlockSectors = s.uint("metadata block size")
	st.MetadataUsed, st.MetadataTotal = s.fraction("metadata blocks")
	st.BlockSectors = s.uint("cache block size")
	st.CacheUsed, st.CacheTotal = s.fraction("cache blocks")
	st.ReadHits = s.uint("read hits")
	st.ReadMisses = s.uint("read misses")
	st.WriteHits = s.uint("write hits")
	st.WriteMisses = s.uint("write misses")
	st.Demotions = s.uint("demotions")
	st.Promotions = s.uint("promotions")
	st.Dirty = s.uint("dirty")
	features := s.list("features")
	core := s.list("core args")
	st.Policy = s.word("policy")
	st.PolicyArgs = s.list("policy args")
	metadataMode := s.word("metadata mode")
	check := s.word("needs_check")
	if s.err == nil && !s.done() {
		s.err = fmt.Errorf("%d unexpected trailing fields", len(s.fields)-s.pos)
	}
	if s.err != nil {
		return CacheStatus{}, s.err
	}
	st.Mode, st.ExtraFeatures = splitMode(features)
	if len(core)%2 != 0 {
		return CacheStatus{}, fmt.Errorf("core args %v: want key/value pairs", core)
	}
	st.CoreArgs = make(map[string]string, len(core)/2)
	for i := 0; i < len(core); i += 2 {
		st.CoreArgs[core[i]] = core[i+1]
	}
	if err := st.setFlags(metadataMode, check); err != nil {
		return CacheStatus{}, err
	}
	return st, nil
}

func (st *CacheStatus) setFlags(metadataMode, check string) error {
	switch metadataMode {
	case "rw":
	case "ro":
		st.ReadOnly = true
	default:
		return fmt.Errorf("metadata mode %q: want rw or ro", metadataMode)
	}
	switch check {
	case "-":
	case "needs_check":
		st.NeedsCheck = true
	default:
		return fmt.Errorf("needs_check field %q: want needs_check or -", check)
	}
	switch {
	case st.NeedsCheck:
		st.Health = CacheNeedsCheck
	case st.ReadOnly:
		st.Health = CacheReadOnly
	default:
		st.Health = CacheHealthy
	}
	return nil
}

// Usable reports whether the cache may keep serving reads; anything else
// must be dropped to a linear table (safety rule 4).
func (st CacheStatus) Usable() bool { return st.Health == CacheHealthy }

// HitRatio is read hits over all reads, or 0 before the first read.
func (st CacheStatus) HitRatio() float64 {
	total := st.ReadHits + st.ReadMisses
	if total == 0 {
		return 0
	}
	return float64(st.ReadHits) / float64(total)
}

// Delta32 is cur-prev for a 32-bit kernel counter sampled twice, correct
// across one wrap. A counter that went backwards from well below the wrap
// point was reset (the cache was re-created with fresh metadata): then the
// delta is cur. Samples are seconds apart, far too close for a counter to
// advance by a quarter of its range between them.
func Delta32(prev, cur uint64) uint64 {
	const wrapZone = 3 << 30 // the top quarter of the 32-bit range
	if cur >= prev {
		return cur - prev
	}
	if prev >= wrapZone && prev <= 0xFFFFFFFF && cur <= 0xFFFFFFFF {
		return (1<<32 - prev) + cur
	}
	return cur
}
