package lvm

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
)

// ErrNoDevice is returned when a pool's selector matches no disk on the node.
var ErrNoDevice = errors.New("no device matches")

// ErrAmbiguousDevice is returned when one disk would go into both pools.
var ErrAmbiguousDevice = errors.New("device matches both pools")

// selectorKeys are the keys a Selector is written with, in String's order.
var selectorKeys = []string{"by-id", "model", "min-size", "max-size", "rotational"}

// Selector picks a pool's devices on each node, so that one DaemonSet serves
// nodes whose disks have other serial numbers. It matches whole disks only
// (never a partition or a device-mapper device) and names each by one of its
// /dev/disk/by-id links: what it selects is then checked and used exactly as
// a device named by path (safety rule 3). The zero Selector selects nothing.
type Selector struct {
	// ByID is a glob over /dev/disk/by-id paths, e.g. /dev/disk/by-id/nvme-Samsung*.
	ByID string
	// Model is a glob over the model sysfs reports, e.g. "ST4000NM*".
	Model string
	// MinSize and MaxSize bound the disk's size in bytes; 0 is no bound.
	MinSize, MaxSize uint64
	// Rotational, when set, wants HDDs (true) or SSDs (false).
	Rotational *bool
}

// IsZero says whether the selector was left unset.
func (s Selector) IsZero() bool {
	return s.ByID == "" && s.Model == "" && s.MinSize == 0 && s.MaxSize == 0 && s.Rotational == nil
}

// String writes the selector as ParseSelector reads it.
func (s Selector) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	if s.ByID != "" {
		add("by-id", s.ByID)
	}
	if s.Model != "" {
		add("model", s.Model)
	}
	if s.MinSize > 0 {
		add("min-size", quantity(s.MinSize))
	}
	if s.MaxSize > 0 {
		add("max-size", quantity(s.MaxSize))
	}
	if s.Rotational != nil {
		add("rotational", strconv.FormatBool(*s.Rotational))
	}
	return strings.Join(parts, ",")
}

// Set parses a flag value; Selector is a flag.Value.
func (s *Selector) Set(v string) error {
	parsed, err := ParseSelector(v)
	if err != nil {
		return err
	}
	*s = parsed
	return nil
}

// ParseSelector reads "key=value,..." with the keys by-id, model, min-size,
// max-size and rotational; "" is the zero selector.
func ParseSelector(v string) (Selector, error) {
	var s Selector
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, "=")
		if !ok || !slices.Contains(selectorKeys, key) || seen[key] {
			return Selector{}, fmt.Errorf("selector %q: %q: want key=value once per key, with keys %s", v, part, strings.Join(selectorKeys, ", "))
		}
		seen[key] = true
		if err := s.setKey(key, val); err != nil {
			return Selector{}, fmt.Errorf("selector %q: %s: %w", v, key, err)
		}
	}
	if s.MaxSize > 0 && s.MinSize > s.MaxSize {
		return Selector{}, fmt.Errorf("selector %q: min-size %s is above max-size %s", v, quantity(s.MinSize), quantity(s.MaxSize))
	}
	return s, nil
}

func (s *Selector) setKey(key, val string) error {
	switch key {
	case "by-id":
		if id, ok := strings.CutPrefix(val, ByIDDir); !ok || id == "" || strings.Contains(id, "/") {
			return fmt.Errorf("%q: want a pattern of %s<id> paths, e.g. %snvme-Samsung*", val, ByIDDir, ByIDDir)
		}
		s.ByID = val
	case "model":
		s.Model = val
	case "min-size", "max-size":
		q, err := resource.ParseQuantity(val)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("%q: want a positive quantity such as 500Gi or 4T", val)
		}
		if key == "min-size" {
			s.MinSize = uint64(q.Value())
		} else {
			s.MaxSize = uint64(q.Value())
		}
		return nil
	case "rotational":
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("%q: want true (HDDs) or false (SSDs)", val)
		}
		s.Rotational = &b
		return nil
	}
	if _, err := filepath.Match(val, ""); err != nil || val == "" {
		return fmt.Errorf("%q is not a glob pattern", val)
	}
	return nil
}

// link returns the by-id link the selector names d by, or false when d is
// not one it selects.
func (s Selector) link(d blockdev.Disk) (string, bool) {
	if !selectable(d) {
		return "", false
	}
	if s.Model != "" {
		if ok, _ := filepath.Match(s.Model, d.Model); !ok {
			return "", false
		}
	}
	if (s.MinSize > 0 && d.Size < s.MinSize) || (s.MaxSize > 0 && d.Size > s.MaxSize) ||
		(s.Rotational != nil && d.Rotational != *s.Rotational) {
		return "", false
	}
	if s.ByID == "" {
		return d.Links[0], true // sorted: the same link on every start
	}
	for _, l := range d.Links {
		if ok, _ := filepath.Match(s.ByID, l); ok {
			return l, true
		}
	}
	return "", false
}

// PoolDevices names one pool's devices: stable paths, a selector, or both.
type PoolDevices struct {
	// VG names the pool in messages.
	VG       string
	Paths    []string
	Selector Selector
}

// Configured says whether the pool has any device source.
func (p PoolDevices) Configured() bool { return len(p.Paths) > 0 || !p.Selector.IsZero() }

// source describes where the pool's devices come from, for messages.
func (p PoolDevices) source() string {
	switch {
	case p.Selector.IsZero():
		return "its device list"
	case len(p.Paths) == 0:
		return fmt.Sprintf("selector %q", p.Selector.String())
	default:
		return fmt.Sprintf("its device list and selector %q", p.Selector.String())
	}
}

// ResolvePool returns the pool's devices on this node: its paths, then one
// by-id link of each disk its selector matches that no path already names.
// A selector that matches nothing is an error naming the disks it saw.
func ResolvePool(disks []blockdev.Disk, p PoolDevices) ([]string, error) {
	out := slices.Clone(p.Paths)
	if p.Selector.IsZero() {
		return out, nil
	}
	named := map[string]bool{}
	for _, d := range disks {
		for _, path := range p.Paths {
			named[d.Node] = named[d.Node] || slices.Contains(d.Links, path)
		}
	}
	matched := 0
	for _, d := range disks {
		if l, ok := p.Selector.link(d); ok {
			matched++
			if !named[d.Node] {
				out = append(out, l)
			}
		}
	}
	if matched == 0 {
		return nil, fmt.Errorf("pool %s: selector %q matches no disk on this node; whole disks here: %s; a selector matches whole disks "+
			"(never partitions or device-mapper devices) by %s: %w", p.VG, p.Selector.String(), describeDisks(disks), strings.Join(selectorKeys, ", "), ErrNoDevice)
	}
	return out, nil
}

// CheckDisjoint fails when a disk is among both pools' resolved devices:
// LVM would refuse it in the second pool, but the operator needs to hear
// which selectors overlap.
func CheckDisjoint(disks []blockdev.Disk, origin, cache PoolDevices, originPaths, cachePaths []string) error {
	nodeOf := func(path string) string {
		for _, d := range disks {
			if slices.Contains(d.Links, path) {
				return d.Node
			}
		}
		return path
	}
	inOrigin := map[string]string{}
	for _, p := range originPaths {
		inOrigin[nodeOf(p)] = p
	}
	for _, p := range cachePaths {
		if o, ok := inOrigin[nodeOf(p)]; ok {
			return fmt.Errorf("device %s (%s, also %s) is selected for pool %s by %s and for pool %s by %s; a disk may be in one pool only: "+
				"narrow a selector (%s) or name the devices by path: %w",
				o, nodeOf(p), p, origin.VG, origin.source(), cache.VG, cache.source(), strings.Join(selectorKeys, ", "), ErrAmbiguousDevice)
		}
	}
	return nil
}

// describeDisks lists the whole disks a selector could have matched.
func describeDisks(disks []blockdev.Disk) string {
	var parts []string
	for _, d := range disks {
		if !selectable(d) {
			continue
		}
		kind := "non-rotational"
		if d.Rotational {
			kind = "rotational"
		}
		parts = append(parts, fmt.Sprintf("%s (%s, %s, %s, model %q)", strings.Join(d.Links, " "), d.Node, quantity(d.Size), kind, d.Model))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// quantity writes n bytes the shorter way: 8T rather than 7812500000Ki,
// 1Ti rather than 1099511627776.
func quantity(n uint64) string {
	dec := resource.NewQuantity(int64(n), resource.DecimalSI).String()
	bin := resource.NewQuantity(int64(n), resource.BinarySI).String()
	if len(bin) < len(dec) {
		return bin
	}
	return dec
}

// selectable says whether a selector may pick d at all: a whole disk with a
// stable name, never a partition or a device-mapper device (an LV of a
// volume, whose content tenants write).
func selectable(d blockdev.Disk) bool {
	return !d.Partition && !d.DeviceMapper && !strings.HasPrefix(filepath.Base(d.Node), "dm-") && len(d.Links) > 0
}
