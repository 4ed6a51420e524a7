package dm

import (
	"fmt"
	"strconv"
	"strings"
)

// DevNum is a block device's major:minor number. Tables are always built with
// device numbers, never paths: they need no /dev nodes (there may be no udev),
// and they compare equal to what the kernel prints back.
type DevNum struct {
	Major, Minor uint32
}

func (d DevNum) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// IsZero reports whether d is unset.
func (d DevNum) IsZero() bool { return d == DevNum{} }

// ParseDevNum parses "major:minor".
func ParseDevNum(s string) (DevNum, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return DevNum{}, fmt.Errorf("device %q: want major:minor", s)
	}
	ma, err := strconv.ParseUint(maj, 10, 32)
	if err != nil {
		return DevNum{}, fmt.Errorf("device %q: major: %w", s, err)
	}
	mi, err := strconv.ParseUint(min, 10, 32)
	if err != nil {
		return DevNum{}, fmt.Errorf("device %q: minor: %w", s, err)
	}
	return DevNum{Major: uint32(ma), Minor: uint32(mi)}, nil
}
