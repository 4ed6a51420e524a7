package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Disk is a block device under a target: the device the target's I/O goes
// to, or a disk at the bottom of its stack (the HDD and the SSD under a
// cached volume).
type Disk struct {
	// Name is the kernel's name (dm-3, sdb, nvme0n1) and, for a dm
	// device, its dm name after a slash (dm-3/ssdcache-pvc-1).
	Name string `json:"name"`
	// Role is DiskTarget or DiskBelow.
	Role string `json:"role"`
	// Rotational is the kernel's rotational flag (true for an HDD; also for
	// many emulated disks, which do not say).
	Rotational bool   `json:"rotational"`
	Model      string `json:"model,omitempty"`
	num        dm.DevNum
}

// The roles of the disks under a target.
const (
	DiskTarget = "target"
	DiskBelow  = "below"
)

// DiskStats finds the disks under a target and reads their block-layer
// counters, as iostat does.
type DiskStats interface {
	// Under returns the device holding path (the device itself, or the
	// filesystem's device for a file) and the disks at the bottom of its
	// stack of dm, md or partitions.
	Under(path string) ([]Disk, error)
	// Read returns a disk's counters since it was created.
	Read(d Disk) (blockdev.IOStats, error)
}

// DiskFigures are iostat's figures of one disk over one test.
type DiskFigures struct {
	Disk string `json:"disk"`
	Role string `json:"role"`
	// ReadIOPS and WriteIOPS are completed requests per second.
	ReadIOPS  float64 `json:"readIOPS"`
	WriteIOPS float64 `json:"writeIOPS"`
	// ReadBytes and WriteBytes are the bytes moved over the whole test,
	// whatever issued them: on the HDD under a cache they are the pass's
	// misses plus any copy the cache made from it meanwhile.
	ReadBytes  int64   `json:"readBytes"`
	WriteBytes int64   `json:"writeBytes"`
	ReadMBps   float64 `json:"readMBps"`
	WriteMBps  float64 `json:"writeMBps"`
	// AwaitMs is the average time a request took, queueing included
	// (iostat's r_await and w_await over all requests); 0 without requests.
	AwaitMs float64 `json:"awaitMs"`
	// QueueDepth is the average number of requests queued or in service
	// (iostat's aqu-sz).
	QueueDepth float64 `json:"queueDepth"`
	// Utilization is the fraction of the time the device had requests in
	// flight (iostat's %util / 100).
	Utilization float64 `json:"utilization"`
}

// diskFigures computes d's figures from its counters over elapsed.
func diskFigures(d Disk, delta blockdev.IOStats, elapsed time.Duration) DiskFigures {
	f := DiskFigures{Disk: d.Name, Role: d.Role, ReadBytes: int64(delta.ReadBytes), WriteBytes: int64(delta.WriteBytes)}
	ms := float64(elapsed.Milliseconds())
	if ms <= 0 {
		return f
	}
	s := ms / 1000
	f.ReadIOPS, f.WriteIOPS = float64(delta.ReadIOs)/s, float64(delta.WriteIOs)/s
	f.ReadMBps, f.WriteMBps = float64(delta.ReadBytes)/1e6/s, float64(delta.WriteBytes)/1e6/s
	if ios := delta.ReadIOs + delta.WriteIOs; ios > 0 {
		f.AwaitMs = float64(delta.ReadTicks+delta.WriteTicks) / float64(ios)
	}
	f.QueueDepth = float64(delta.TimeInQueue) / ms
	f.Utilization = min(float64(delta.IOTicks)/ms, 1)
	return f
}

// SysfsDisks reads the disks' stack and counters from sysfs (Root is /sys
// but in tests). It needs no privilege: a pod sees the node's sysfs. The
// counters come through prometheus/procfs' blockdevice (blockdev.ReadIOStats);
// the stack and attributes are read here, since that reader goes by
// /sys/block name and has no model, and a partition's flag is its disk's.
type SysfsDisks struct {
	Root string
}

var _ DiskStats = SysfsDisks{}

func (s SysfsDisks) Under(path string) ([]Disk, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	num := st.Dev
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		num = st.Rdev
	}
	return s.under(dm.DevNum{Major: unix.Major(num), Minor: unix.Minor(num)})
}

// under lists the device num and the disks at the bottom of its stack.
func (s SysfsDisks) under(num dm.DevNum) ([]Disk, error) {
	dir, err := filepath.EvalSymlinks(filepath.Join(s.Root, "dev", "block", num.String()))
	if err != nil {
		return nil, fmt.Errorf("device %s in sysfs: %w", num, err)
	}
	top, err := s.disk(dir, DiskTarget)
	if err != nil {
		return nil, err
	}
	leaves, err := s.leaves(dir)
	if err != nil {
		return nil, err
	}
	disks := []Disk{top}
	for _, leaf := range leaves {
		if leaf == dir {
			continue // a disk with nothing beneath it is its own bottom
		}
		d, err := s.disk(leaf, DiskBelow)
		if err != nil {
			return nil, err
		}
		disks = append(disks, d)
	}
	return disks, nil
}

// leaves are the sysfs directories of the devices under dir that have no
// slaves themselves, each once, in name order.
func (s SysfsDisks) leaves(dir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "slaves"))
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return []string{dir}, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		below, err := filepath.EvalSymlinks(filepath.Join(dir, "slaves", e.Name()))
		if err != nil {
			return nil, err
		}
		sub, err := s.leaves(below)
		if err != nil {
			return nil, err
		}
		for _, l := range sub {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	return out, nil
}

// disk describes the device whose sysfs directory is dir. A partition's
// rotational flag and model are its disk's, one directory up.
func (s SysfsDisks) disk(dir, role string) (Disk, error) {
	num, err := dm.ParseDevNum(readTrimmed(filepath.Join(dir, "dev")))
	if err != nil {
		return Disk{}, fmt.Errorf("device number of %s: %w", dir, err)
	}
	d := Disk{Name: filepath.Base(dir), Role: role, num: num}
	if name := readTrimmed(filepath.Join(dir, "dm", "name")); name != "" {
		d.Name += "/" + name
	}
	whole := dir
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		whole = filepath.Dir(dir)
	}
	d.Rotational = readTrimmed(filepath.Join(whole, "queue", "rotational")) == "1"
	d.Model = readTrimmed(filepath.Join(whole, "device", "model"))
	return d, nil
}

func (s SysfsDisks) Read(d Disk) (blockdev.IOStats, error) {
	return blockdev.ReadIOStats(s.Root, d.num)
}

// readTrimmed is a sysfs attribute's value, or "" when it cannot be read.
func readTrimmed(path string) string {
	v, _ := blockdev.SysfsAttr(path)
	return v
}
