package cache

import (
	"errors"
	"strings"
	"testing"
)

// Volume IDs name LVs and dm devices: names LVM reserves for its own
// sub-LVs, and IDs whose LV dm names would pass the kernel's 127 characters
// once LVM doubles their hyphens, are refused before any command runs.
func TestValidateVolumeIDRefusesWhatLVMOrDMCannotName(t *testing.T) {
	for _, id := range []string{
		"snapshot0", "pvmove-1", "data_tmeta", "x_cdata_y", "a_rimage_0", "pool_cmeta",
		strings.Repeat("a-", 48),          // 96 characters, 144 once escaped
		"pvc-" + strings.Repeat("-a", 46), // 96 characters
		"", "-x", "a/b", strings.Repeat("a", 97),
	} {
		if err := ValidateVolumeID(id); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateVolumeID(%q) = %v, want ErrInvalid", id, err)
		}
	}
	for _, id := range []string{
		"pvc-4f0c1c3e-9d2b-4b8e-a0a7-0c6f2f3c9e11", "vol-0123456789abcdef0123456789abcdef",
		"my.volume+1", "snap", strings.Repeat("a", 96), "a-" + strings.Repeat("b", 92),
	} {
		if err := ValidateVolumeID(id); err != nil {
			t.Errorf("ValidateVolumeID(%q) = %v, want accepted", id, err)
		}
	}
}
