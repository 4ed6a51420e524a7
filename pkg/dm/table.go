package dm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
)

// SectorSize is the unit of every length in a device-mapper table.
const SectorSize = cachesize.SectorSize

// Table is a single-target device-mapper table starting at sector 0, the only
// shape ssdcache creates.
type Table struct {
	Length uint64 // sectors
	Target Target
}

// Target is the type-specific part of a table line.
type Target interface {
	Type() string
	// Params is the target's argument string, as dmsetup expects it.
	Params() string
}

// String renders the table line that dmsetup create/load reads.
func (t Table) String() string {
	return fmt.Sprintf("0 %d %s %s", t.Length, t.Target.Type(), t.Target.Params())
}

// Equal reports whether two tables would make the kernel do the same thing.
func (t Table) Equal(o Table) bool {
	return t.Target != nil && o.Target != nil && t.String() == o.String()
}

// LinearTarget maps the device one to one onto Device from sector Offset.
type LinearTarget struct {
	Device DevNum
	Offset uint64
}

func (LinearTarget) Type() string { return "linear" }

func (l LinearTarget) Params() string { return fmt.Sprintf("%s %d", l.Device, l.Offset) }

// ErrorTarget fails every I/O; tests use it to model a dead cache device.
type ErrorTarget struct{}

func (ErrorTarget) Type() string   { return "error" }
func (ErrorTarget) Params() string { return "" }

// CacheMode is dm-cache's I/O mode feature.
type CacheMode string

const (
	// Writethrough completes a write only once it is on the origin: ssdcache's read cache.
	Writethrough CacheMode = "writethrough"
	// Passthrough serves every read from the origin: how older versions of
	// ssdcache paused a cache; read, never loaded any more.
	Passthrough CacheMode = "passthrough"
	// Writeback is parsed so foreign tables can be recognised, never built.
	Writeback CacheMode = "writeback"
)

// CacheTarget is a dm-cache target line.
type CacheTarget struct {
	Metadata DevNum
	Data     DevNum
	Origin   DevNum
	// BlockSectors is the cache block (chunk) size in sectors.
	BlockSectors uint64
	Mode         CacheMode
	// ExtraFeatures are features other than the mode (metadata2, no_discard_passdown).
	ExtraFeatures []string
	Policy        string
	PolicyArgs    []string
}

func (CacheTarget) Type() string { return "cache" }

func (c CacheTarget) Params() string {
	features := append([]string{string(c.Mode)}, c.ExtraFeatures...)
	policy := c.Policy
	if policy == "" {
		policy = "smq"
	}
	parts := []string{
		c.Metadata.String(), c.Data.String(), c.Origin.String(),
		strconv.FormatUint(c.BlockSectors, 10),
		strconv.Itoa(len(features)),
	}
	parts = append(parts, features...)
	parts = append(parts, policy, strconv.Itoa(len(c.PolicyArgs)))
	parts = append(parts, c.PolicyArgs...)
	return strings.Join(parts, " ")
}

// Validate refuses cache targets that ssdcache must never load.
func (c CacheTarget) Validate() error {
	if c.Mode != Writethrough && c.Mode != Passthrough {
		return fmt.Errorf("cache mode %q: only %q and %q are allowed (the origin must always hold all data)", c.Mode, Writethrough, Passthrough)
	}
	if err := cachesize.ValidateBlockSectors(c.BlockSectors); err != nil {
		return err
	}
	if c.Metadata.IsZero() || c.Data.IsZero() || c.Origin.IsZero() {
		return fmt.Errorf("cache target %s: metadata, data and origin devices are all required", c.Params())
	}
	return nil
}

// ParseTable parses one line of `dmsetup table` output for a single-target device.
func ParseTable(line string) (Table, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 {
		return Table{}, fmt.Errorf("table %q: want <start> <length> <type> [params]", line)
	}
	if fields[0] != "0" {
		return Table{}, fmt.Errorf("table %q: start %s: only single-target tables starting at 0 are supported", line, fields[0])
	}
	length, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil || length == 0 {
		return Table{}, fmt.Errorf("table %q: length %q is not a positive sector count", line, fields[1])
	}
	var target Target
	switch params := fields[3:]; fields[2] {
	case "linear":
		target, err = parseLinear(params)
	case "cache":
		target, err = parseCacheTable(params)
	case "error":
		if len(params) != 0 {
			err = fmt.Errorf("error target takes no parameters")
		}
		target = ErrorTarget{}
	default:
		target = RawTarget{TargetType: fields[2], Args: strings.Join(params, " ")}
	}
	if err != nil {
		return Table{}, fmt.Errorf("table %q: %w", line, err)
	}
	return Table{Length: length, Target: target}, nil
}

// RawTarget is any target type ssdcache does not model; it is kept so a
// foreign table can be reported, never to be built.
type RawTarget struct {
	TargetType string
	Args       string
}

func (r RawTarget) Type() string   { return r.TargetType }
func (r RawTarget) Params() string { return r.Args }

func parseLinear(p []string) (LinearTarget, error) {
	if len(p) != 2 {
		return LinearTarget{}, fmt.Errorf("linear: want <device> <offset>, got %d fields", len(p))
	}
	dev, err := ParseDevNum(p[0])
	if err != nil {
		return LinearTarget{}, fmt.Errorf("linear: %w", err)
	}
	off, err := strconv.ParseUint(p[1], 10, 64)
	if err != nil {
		return LinearTarget{}, fmt.Errorf("linear: offset %q: %w", p[1], err)
	}
	return LinearTarget{Device: dev, Offset: off}, nil
}

func parseCacheTable(p []string) (CacheTarget, error) {
	s := scanner{fields: p, what: "cache table"}
	var c CacheTarget
	c.Metadata = s.devNum("metadata device")
	c.Data = s.devNum("cache device")
	c.Origin = s.devNum("origin device")
	c.BlockSectors = s.uint("block size")
	features := s.list("features")
	c.Policy = s.word("policy")
	c.PolicyArgs = s.list("policy args")
	if s.err == nil && !s.done() {
		s.err = fmt.Errorf("cache table: %d unexpected trailing fields", len(s.fields)-s.pos)
	}
	if s.err != nil {
		return CacheTarget{}, s.err
	}
	c.Mode, c.ExtraFeatures = splitMode(features)
	return c, nil
}

// splitMode separates the I/O mode from the other features; dm-cache defaults
// to writeback when no mode is given.
func splitMode(features []string) (CacheMode, []string) {
	mode := Writeback
	var extra []string
	for _, f := range features {
		switch CacheMode(f) {
		case Writethrough, Passthrough, Writeback:
			mode = CacheMode(f)
		default:
			extra = append(extra, f)
		}
	}
	return mode, extra
}
