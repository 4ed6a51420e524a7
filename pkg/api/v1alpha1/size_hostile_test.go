package v1alpha1

import (
	"strings"
	"testing"
	"time"
)

// TestParseCacheSizeHostileAccepted: sizes near the int64 edge and odd spellings the
// CRD accepts keep parsing to the value they spell. Absurd but representable sizes
// are the controller's to cap (at the volume's size and the node's capacity).
func TestParseCacheSizeHostileAccepted(t *testing.T) {
	cases := map[string]int64{
		"92233720368547758e2":              9223372036854775800,
		"9223372036854775k":                9223372036854775000,
		"9223372036854775806":              9223372036854775806,
		"7Ei":                              7 << 60,
		"8191Pi":                           8191 << 50,
		"1e18":                             1_000_000_000_000_000_000,
		"1e+9":                             1_000_000_000,
		"1E9":                              1_000_000_000,
		"016Mi":                            16 << 20,
		"+16Mi":                            16 << 20,
		"0000000000000000000000000016Mi":   16 << 20, // 30 characters
		"16777216000m":                     16 << 20,
		"16777216000000000n":               16 << 20,
		"1.Gi":                             1 << 30,
		".5Gi":                             512 << 20,
		"0.0000000000000000000001e30":      100_000_000,
		"2000000000000000000000000e-17":    20_000_000,
		"1e000000000000000000000000000009": 1_000_000_000, // 32 characters, exponent 9
	}
	for in, want := range cases {
		got, err := ParseCacheSize(in)
		if err != nil || got != (CacheSize{Bytes: want}) {
			t.Errorf("ParseCacheSize(%q) = %+v, %v; want %d bytes", in, got, err, want)
		}
	}
}

// TestParseCacheSizeHostileRefused: values beyond int64, exponents that
// resource.ParseQuantity would truncate to int32 (and so read as another, small
// value), fractions, signs and overlong strings are refused, naming the value.
func TestParseCacheSizeHostileRefused(t *testing.T) {
	long := strings.Repeat("0", 29) + "16Mi" // 33 characters, 16Mi
	cases := map[string]string{
		"9223372036854775807":    "larger than 9223372036854775806 bytes",
		"9223372036854775808":    "larger than",
		"18446744073709551616":   "larger than",
		"92233720368547758e3":    "larger than",
		"9223372036854776k":      "larger than",
		"8Ei":                    "larger than",
		"8192Pi":                 "larger than",
		"9223372036854775807.0":  "larger than",
		"1e19":                   "larger than",
		"1e64":                   "larger than",
		"16777216e4294967296":    "exponent 4294967296 is out of range",
		"16777216e-4294967296":   "exponent -4294967296 is out of range",
		"1e4294967305":           "exponent 4294967305 is out of range",
		"1e9223372036854775807":  "out of range",
		"1e9223372036854775808":  "out of range",
		"1e-9223372036854775809": "out of range",
		"1e65":                   "from -64 to 64",
		"1e-65":                  "from -64 to 64",
		"9223372036854775806.5":  "whole number of bytes",
		"16777216.000000000001":  "whole number of bytes",
		"1e-9":                   "whole number of bytes",
		"1n":                     "whole number of bytes",
		"-16Mi":                  "at least 16Mi",
		"-9223372036854775808":   "at least 16Mi",
		"-1e18":                  "at least 16Mi",
		"0e30":                   "at least 16Mi",
		"--16Mi":                 "want a quantity",
		"+-16Mi":                 "want a quantity",
		"1e+-9":                  "want a quantity",
		"1e9e9":                  "want a quantity",
		"0x1000000":              "want a quantity",
		"16Mi ":                  "want a quantity",
		"+100%":                  "from 1% to 100%",
		"0100%":                  "from 1% to 100%",
		"100.0%":                 "from 1% to 100%",
		"1e2%":                   "from 1% to 100%",
		"9223372036854775807%":   "from 1% to 100%",
		"-1%":                    "from 1% to 100%",
		long:                     "33 characters long; at most 32",
	}
	for in, wantMsg := range cases {
		_, err := ParseCacheSize(in)
		if err == nil {
			t.Errorf("ParseCacheSize(%q): no error, want one containing %q", in, wantMsg)
			continue
		}
		if !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), in[:min(len(in), 32)]) {
			t.Errorf("ParseCacheSize(%q) error %q, want one naming the value and containing %q", in, err, wantMsg)
		}
	}
}

// TestParseCacheSizeHugeExponentIsQuick: ParseQuantity builds the exact decimal of
// "1e2147483647" (minutes and gigabytes); a StorageClass parameter or a binding must
// not stall the controller that way. An overlong parameter is refused without being
// echoed whole.
func TestParseCacheSizeHugeExponentIsQuick(t *testing.T) {
	for _, in := range []string{"1e2147483647", "1e-2147483648", "1e10000000", "16e-10000000", strings.Repeat("9", 1<<20)} {
		done := make(chan error, 1)
		go func() {
			_, err := ParseCacheSize(in)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("ParseCacheSize(%.40q): no error", in)
			} else if len(err.Error()) > 200 {
				t.Errorf("ParseCacheSize(%.40q): error of %d characters", in, len(err.Error()))
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("ParseCacheSize(%.40q) still running after 2s", in)
		}
	}
}
