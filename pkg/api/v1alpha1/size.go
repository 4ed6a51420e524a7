package v1alpha1

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MinCacheSizeBytes is the smallest cache accepted: below it dm-cache's metadata
// (at least 2 MiB) would not leave room for a useful number of data blocks. The CRD's
// CEL rule on spec.size says the same.
const MinCacheSizeBytes int64 = 16 << 20

// MaxCacheSizeLength is the longest spec.size the CRD accepts (its MaxLength). The
// StorageClass parameter has no such limit of its own, so ParseCacheSize applies it.
const MaxCacheSizeLength = 32

// percentSize and longExponent are the CRD's own patterns for spec.size. An
// exponent of three or more digits is refused before resource.ParseQuantity sees
// it: ParseQuantity truncates exponents to int32 ("16777216e4294967296" reads as
// 16Mi) and builds the exact decimal of "1e2147483647" in minutes and gigabytes.
// Two digits cover every size from 16Mi to 2^63 bytes.
var (
	percentSize  = regexp.MustCompile(`^([1-9][0-9]?|100)%$`)
	longExponent = regexp.MustCompile(`[eE][-+]?[0-9]{3,}$`)
)

// CacheSize is a parsed CacheBindingSpec.Size: either a fixed number of bytes or a
// percentage of the volume. Exactly one of Bytes and Percent is non-zero.
type CacheSize struct {
	Bytes   int64
	Percent int64
}

// ParseCacheSize parses a cache size with exactly the grammar of the CRD's
// validation of CacheBindingSpec.Size, so that a StorageClass parameter that
// parses here also makes a binding the API server accepts:
//   - a whole percentage from 1% to 100% ("10%");
//   - or a quantity ("10Gi", "500M") of at least 16Mi that Kubernetes can read as
//     a 64-bit integer: resource.Quantity.AsInt64, which CEL's isInteger() uses,
//     refuses fractions even when they come out whole ("1.5Gi"; write "1536Mi"),
//     milli-units ("16777216000m") and some large binary sizes ("7Ei").
func ParseCacheSize(s string) (CacheSize, error) {
	switch {
	case s == "":
		return CacheSize{}, fmt.Errorf("cache size is empty: want a quantity such as 10Gi or a percentage such as 10%%")
	case len(s) > MaxCacheSizeLength:
		// Quote only the start: the value may be a StorageClass parameter of any length.
		return CacheSize{}, fmt.Errorf("cache size %q... is %d characters long; at most %d are allowed",
			s[:MaxCacheSizeLength], len(s), MaxCacheSizeLength)
	case strings.HasSuffix(s, "%"):
		if !percentSize.MatchString(s) {
			return CacheSize{}, fmt.Errorf("cache size %q: a percentage must be a whole number from 1%% to 100%%", s)
		}
		p, _ := strconv.ParseInt(strings.TrimSuffix(s, "%"), 10, 64)
		return CacheSize{Percent: p}, nil
	case longExponent.MatchString(s):
		return CacheSize{}, fmt.Errorf("cache size %q: an exponent may have at most two digits", s)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return CacheSize{}, fmt.Errorf("cache size %q: want a quantity such as 10Gi or a percentage such as 10%%", s)
	}
	n, ok := q.AsInt64()
	if !ok {
		return CacheSize{}, fmt.Errorf("cache size %q must be a whole number of bytes below 2^63, written without a fraction (1536Mi, not 1.5Gi)", s)
	}
	if n < MinCacheSizeBytes {
		return CacheSize{}, fmt.Errorf("cache size %q must be at least 16Mi", s)
	}
	return CacheSize{Bytes: n}, nil
}

// String returns the size in the syntax ParseCacheSize accepts.
func (c CacheSize) String() string {
	if c.Percent != 0 {
		return strconv.FormatInt(c.Percent, 10) + "%"
	}
	return resource.NewQuantity(c.Bytes, resource.BinarySI).String()
}

// Resolve returns the cache size in bytes for a volume of volumeBytes: Bytes as is,
// or Percent of the volume rounded down to whole MiB (cache slices are allocated in
// MiB-aligned extents). It fails when the result is below MinCacheSizeBytes.
func (c CacheSize) Resolve(volumeBytes int64) (int64, error) {
	if c.Percent == 0 {
		return c.Bytes, nil
	}
	if volumeBytes <= 0 {
		return 0, fmt.Errorf("cannot take %d%% of a volume whose size is unknown (%d bytes)", c.Percent, volumeBytes)
	}
	// volumeBytes/100*Percent cannot overflow int64 for Percent <= 100.
	b := (volumeBytes/100*c.Percent + volumeBytes%100*c.Percent/100) &^ (1<<20 - 1)
	if b < MinCacheSizeBytes {
		return 0, fmt.Errorf("%d%% of a volume of %d bytes is %d bytes, less than the minimum cache of 16Mi", c.Percent, volumeBytes, b)
	}
	return b, nil
}

// ResolveCapped is Resolve capped at the volume's size (what 100% resolves
// to): a cache larger than the volume it fronts holds nothing more, while the
// node would be charged the whole request. capped says that it was. With the
// volume's size unknown (0) nothing is capped.
func (c CacheSize) ResolveCapped(volumeBytes int64) (bytes int64, capped bool, err error) {
	b, err := c.Resolve(volumeBytes)
	if err != nil || volumeBytes <= 0 || b <= volumeBytes {
		return b, false, err
	}
	limit, err := CacheSize{Percent: 100}.Resolve(volumeBytes)
	if err != nil {
		return 0, false, fmt.Errorf("%d bytes is more than the volume's %d bytes, and the volume is too small to cache: %w", b, volumeBytes, err)
	}
	return limit, true, nil
}

// FormatHitRatio formats hits/(hits+misses) as CacheFigures.HitRatio wants it:
// a percentage with one decimal, rounded down ("87.5%"), and "0.0%" before any read.
func FormatHitRatio(hits, misses int64) string {
	total := hits + misses
	if hits <= 0 || total <= 0 {
		return "0.0%"
	}
	// Per-mille in big arithmetic so that large counters cannot overflow.
	pm := new(big.Int).Div(new(big.Int).Mul(big.NewInt(hits), big.NewInt(1000)), big.NewInt(total)).Int64()
	return fmt.Sprintf("%d.%d%%", pm/10, pm%10)
}

// ParseWarmupLimit parses CacheBindingSpec.WarmupLimit with the grammar of
// the CRD's validation: a quantity of whole bytes from 0 to 2^63-1; ok is
// false for the empty string (no limit but the cache's size).
func ParseWarmupLimit(s string) (bytes int64, ok bool, err error) {
	switch {
	case s == "":
		return 0, false, nil
	case len(s) > MaxCacheSizeLength:
		return 0, false, fmt.Errorf("warmupLimit %q... is %d characters long; at most %d are allowed", s[:MaxCacheSizeLength], len(s), MaxCacheSizeLength)
	case longExponent.MatchString(s):
		return 0, false, fmt.Errorf("warmupLimit %q: an exponent may have at most two digits", s)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, false, fmt.Errorf("warmupLimit %q: want a quantity of bytes such as 2Gi", s)
	}
	n, isInt := q.AsInt64()
	if !isInt || n < 0 {
		return 0, false, fmt.Errorf("warmupLimit %q must be a whole number of bytes from 0 to 2^63-1, written without a fraction (1536Mi, not 1.5Gi)", s)
	}
	return n, true, nil
}
