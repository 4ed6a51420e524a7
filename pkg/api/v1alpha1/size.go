package v1alpha1

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MinCacheSizeBytes is the smallest cache accepted: below it dm-cache's metadata
// (at least 2 MiB) would not leave room for a useful number of data blocks. The CRD's
// CEL rule on spec.size says the same.
const MinCacheSizeBytes int64 = 16 << 20

// MaxCacheSizeLength is the longest spec.size the CRD accepts (its MaxLength). The
// StorageClass parameter has no such limit of its own, so ParseCacheSize applies it.
const MaxCacheSizeLength = 32

// maxSizeExponent bounds the exponent of a quantity such as "1e9". A whole number of
// bytes from 16Mi to 2^63 written in MaxCacheSizeLength characters needs an exponent
// between -23 and 47, so nothing sane is refused. Beyond it resource.ParseQuantity
// goes wrong: it truncates the exponent to int32 ("16777216e4294967296" reads as 16Mi)
// and the exact decimal of "1e2147483647" takes minutes and gigabytes to build.
const maxSizeExponent = 64

// CacheSize is a parsed CacheBindingSpec.Size: either a fixed number of bytes or a
// percentage of the volume. Exactly one of Bytes and Percent is non-zero.
type CacheSize struct {
	Bytes   int64
	Percent int64
}

// ParseCacheSize parses a cache size as CacheBindingSpec.Size and the
// ssdcache.io/cache-size StorageClass parameter accept it: a quantity of whole bytes
// of at least 16Mi ("10Gi", "500M") or a whole percentage from 1% to 100% ("10%").
// It accepts what the CRD's validation accepts, so that a StorageClass parameter is
// refused before a binding is created from it, except quantities the CRD's CEL rules
// misread or cannot bound: more than 2^63-2 bytes, or exponents beyond ±64.
func ParseCacheSize(s string) (CacheSize, error) {
	if s == "" {
		return CacheSize{}, fmt.Errorf("cache size is empty: want a quantity such as 10Gi or a percentage such as 10%%")
	}
	if len(s) > MaxCacheSizeLength {
		// Quote only the start: the value may be a StorageClass parameter of any length.
		return CacheSize{}, fmt.Errorf("cache size %q... is %d characters long; at most %d are allowed",
			s[:MaxCacheSizeLength], len(s), MaxCacheSizeLength)
	}
	if num, ok := strings.CutSuffix(s, "%"); ok {
		return parsePercent(s, num)
	}
	return parseQuantity(s)
}

func parsePercent(s, num string) (CacheSize, error) {
	p, err := strconv.ParseInt(num, 10, 64)
	// ParseInt accepts "+5" and "05"; the CRD pattern does not, so neither do we.
	if err != nil || p < 1 || p > 100 || strconv.FormatInt(p, 10) != num {
		return CacheSize{}, fmt.Errorf("cache size %q: a percentage must be a whole number from 1%% to 100%%", s)
	}
	return CacheSize{Percent: p}, nil
}

func parseQuantity(s string) (CacheSize, error) {
	if err := checkExponent(s); err != nil {
		return CacheSize{}, err
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return CacheSize{}, fmt.Errorf("cache size %q: want a quantity such as 10Gi or a percentage such as 10%%", s)
	}
	// Work on the exact decimal: Value() would round fractions up and saturate.
	exact := q.AsDec()
	whole := new(inf.Dec).Round(exact, 0, inf.RoundDown)
	if whole.Cmp(exact) != 0 {
		return CacheSize{}, fmt.Errorf("cache size %q must be a whole number of bytes", s)
	}
	n := whole.UnscaledBig()
	if n.Cmp(big.NewInt(MinCacheSizeBytes)) < 0 {
		return CacheSize{}, fmt.Errorf("cache size %q must be at least 16Mi", s)
	}
	// ParseQuantity saturates values beyond int64 at MaxInt64.
	if !n.IsInt64() || n.Int64() == math.MaxInt64 {
		return CacheSize{}, fmt.Errorf("cache size %q is larger than %d bytes", s, int64(math.MaxInt64-1))
	}
	return CacheSize{Bytes: n.Int64()}, nil
}

// checkExponent refuses a decimal exponent ("e9", "E-3") beyond ±maxSizeExponent
// before resource.ParseQuantity sees it; see maxSizeExponent for why.
func checkExponent(s string) error {
	i := strings.IndexAny(s, "eE")
	if i < 0 || i == len(s)-1 {
		return nil // no exponent, or the suffix E (exa)
	}
	exp := s[i+1:]
	digits := exp
	if digits[0] == '+' || digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return nil // not an exponent ("Ei"); ParseQuantity judges the rest
	}
	// The shape is an integer's, so ParseInt can only fail on range.
	e, err := strconv.ParseInt(exp, 10, 64)
	if err == nil && e >= -maxSizeExponent && e <= maxSizeExponent {
		return nil
	}
	return fmt.Errorf("cache size %q: exponent %s is out of range; a size of 16Mi to %d bytes needs one from -%d to %d",
		s, exp, int64(math.MaxInt64-1), maxSizeExponent, maxSizeExponent)
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
