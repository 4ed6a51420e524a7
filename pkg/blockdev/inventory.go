package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Disk is one block device as a device selector sees it: the stable names
// udev gave it and what sysfs says about it.
type Disk struct {
	// Node is the kernel's name, e.g. /dev/sdb.
	Node string
	// Links are its /dev/disk/by-id paths, sorted.
	Links []string
	Size  uint64 // bytes
	// Rotational is sysfs' queue/rotational (a partition's disk's): true
	// for HDDs.
	Rotational bool
	// Model is sysfs' device/model (a partition's disk's), trimmed; "" when
	// the device has none.
	Model string
	// Partition is true for a partition of a disk.
	Partition bool
	// DeviceMapper is true for a dm device (an LV, a dm-crypt mapping...).
	DeviceMapper bool
}

// Inventory lists the node's block devices that have /dev/disk/by-id links,
// for pool device selectors.
type Inventory interface {
	Disks() ([]Disk, error)
}

// SysInventory implements Inventory over a by-id directory and sysfs; the
// roots are fields so that tests can point them at a tree of their own.
type SysInventory struct {
	// ByIDDir is /dev/disk/by-id.
	ByIDDir string
	// SysBlock is /sys/class/block.
	SysBlock string
}

// NewHostInventory reads the node's real /dev/disk/by-id and sysfs.
func NewHostInventory() SysInventory {
	return SysInventory{ByIDDir: "/dev/disk/by-id", SysBlock: "/sys/class/block"}
}

var _ Inventory = SysInventory{}

// Disks groups the by-id links by the device they point to. A node without
// a by-id directory (no disk with a stable name) has no disks.
func (s SysInventory) Disks() ([]Disk, error) {
	entries, err := os.ReadDir(s.ByIDDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	byNode := map[string]*Disk{}
	var order []string
	for _, e := range entries {
		link := filepath.Join(s.ByIDDir, e.Name())
		node, err := filepath.EvalSymlinks(link)
		if err != nil {
			continue // a link whose device just went away
		}
		d, ok := byNode[node]
		if !ok {
			if d, err = s.describe(node); err != nil {
				continue // not a block device sysfs knows: nothing a selector may pick
			}
			byNode[node] = d
			order = append(order, node)
		}
		d.Links = append(d.Links, link)
	}
	disks := make([]Disk, 0, len(order))
	for _, node := range order {
		slices.Sort(byNode[node].Links)
		disks = append(disks, *byNode[node])
	}
	return disks, nil
}

// describe reads one device's attributes from sysfs. Hand-written rather
// than prometheus/procfs' blockdevice, which reads /sys/block (no
// partitions) and has no device/model.
func (s SysInventory) describe(node string) (*Disk, error) {
	dir := filepath.Join(s.SysBlock, filepath.Base(node))
	read := func(name string) (string, bool) { return SysfsAttr(filepath.Join(dir, name)) }
	d := &Disk{Node: node, DeviceMapper: strings.HasPrefix(filepath.Base(node), "dm-")}
	sectors, ok := read("size")
	if !ok {
		return nil, fmt.Errorf("%s: no size in %s", node, dir)
	}
	n, err := strconv.ParseUint(sectors, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: size %q: %w", node, sectors, err)
	}
	d.Size = n * dm.SectorSize
	_, d.Partition = read("partition")
	whole, err := wholeDiskDir(dir, d.Partition)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", node, err)
	}
	rot, _ := SysfsAttr(filepath.Join(whole, "queue", "rotational"))
	d.Rotational = rot == "1"
	d.Model, _ = SysfsAttr(filepath.Join(whole, "device", "model"))
	return d, nil
}

// wholeDiskDir is the sysfs directory holding the queue/ and device/ of the
// device whose /sys/class/block entry is dir. A partition has neither: they
// are its disk's, whose directory holds the partition's (/sys/class/block/
// sda1 links to .../block/sda/sda1, nvme0n1p2 to .../nvme0/nvme0n1/nvme0n1p2),
// so the link is followed first: filepath.Join(dir, "..") cleans to
// /sys/class/block itself.
func wholeDiskDir(dir string, partition bool) (string, error) {
	if !partition {
		return dir, nil
	}
	target, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("partition's disk in sysfs: %w", err)
	}
	return filepath.Dir(target), nil
}

// SysfsAttr is a sysfs attribute's value, trimmed; ok is false when it
// cannot be read (the device has no such attribute).
func SysfsAttr(path string) (value string, ok bool) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err == nil
}
