// Package blockdev answers questions about block devices (what signatures a
// device carries, how big it is, its device number) and performs the direct
// writes ssdcache makes: zeroing the head of a cache metadata device and
// copying a volume's hot blocks into its cache data device.
package blockdev

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/prometheus/procfs/blockdevice"
	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/command"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Signature is something wipefs recognises on a device: a filesystem, a
// partition table, an LVM physical volume, a RAID member...
type Signature struct {
	Type   string `json:"type"`
	Offset string `json:"offset"`
	UUID   string `json:"uuid"`
	Label  string `json:"label"`
}

// LVMMember is the signature type of an LVM physical volume.
const LVMMember = "LVM2_member"

// Interface is the block-device access the node needs.
type Interface interface {
	// Resolve follows symlinks (a /dev/disk/by-id link) to the device node.
	Resolve(path string) (string, error)
	// Signatures lists what is written on the device, without changing it.
	Signatures(ctx context.Context, path string) ([]Signature, error)
	// Size returns the device size in bytes.
	Size(ctx context.Context, path string) (uint64, error)
	// DevNum returns the device's major:minor.
	DevNum(path string) (dm.DevNum, error)
	// ZeroHead overwrites the first n bytes of the device with zeros, durably,
	// after checking that the opened path is device want: the path is a name,
	// the table that will read the metadata uses the number, and the two can
	// disagree (an LV removed and another created under the name meanwhile).
	ZeroHead(path string, want dm.DevNum, n uint64) error
	// CopyExtents copies byte ranges of device src (named by number, as
	// tables name their origins) to dst with direct I/O, after checking that
	// dst is device want (as ZeroHead does), and returns once every write
	// has completed, without flushing dst's write cache (a cache's data is
	// never trusted after a power loss). Offsets and lengths are multiples
	// of 4096.
	CopyExtents(ctx context.Context, src dm.DevNum, dst string, want dm.DevNum, extents []Extent) error
	// Flush empties the device's write cache, after checking that path is
	// device want (as ZeroHead does): every write it completed is then durable.
	Flush(path string, want dm.DevNum) error
	// Wipe erases every signature; only for devices an operator told us to adopt.
	Wipe(ctx context.Context, path string) error
	// IOStats returns the block layer's counters of a device since it was
	// created (/sys/dev/block/M:m/stat).
	IOStats(num dm.DevNum) (IOStats, error)
	// ProbeRead reads the device's first block past every cache, to tell
	// whether it still answers.
	ProbeRead(path string) error
	// Holders lists the devices stacked on this one (device-mapper, md,
	// bcache): a device with holders is in use by the kernel.
	Holders(path string) ([]string, error)
}

// Extent is a byte range copied from Src on one device (or buffer) to Dst
// on another.
type Extent struct {
	Src, Dst, Length uint64
}

// IOStats are a block device's cumulative counters, the fields of
// Documentation/block/stat.rst. Times are in milliseconds and the kernel
// prints them as 32-bit numbers, so they wrap every 49.7 days; the request
// and sector counts are 64-bit. Discard and flush fields are zero on
// kernels that do not report them.
type IOStats struct {
	ReadIOs, ReadMerges, ReadBytes, ReadTicks     uint64
	WriteIOs, WriteMerges, WriteBytes, WriteTicks uint64
	// InFlight is the number of requests in flight when read: a level, not a count.
	InFlight uint64
	// IOTicks is the time the device had requests in flight (iostat's %util
	// is its rate); TimeInQueue the time requests waited and were served,
	// summed over requests (iostat's aqu-sz is its rate).
	IOTicks, TimeInQueue                                  uint64
	DiscardIOs, DiscardMerges, DiscardBytes, DiscardTicks uint64
	FlushIOs, FlushTicks                                  uint64
}

// Since returns the counts between prev and s, both read from one device.
// A device re-created in between (a request or byte count lower than
// before) counts from zero; a lower time is a 32-bit wrap. InFlight is s's.
func (s IOStats) Since(prev IOStats) IOStats {
	if s.ReadIOs < prev.ReadIOs || s.WriteIOs < prev.WriteIOs || s.ReadBytes < prev.ReadBytes ||
		s.WriteBytes < prev.WriteBytes || s.DiscardIOs < prev.DiscardIOs || s.FlushIOs < prev.FlushIOs {
		return s
	}
	return IOStats{
		ReadIOs: s.ReadIOs - prev.ReadIOs, ReadMerges: delta(prev.ReadMerges, s.ReadMerges),
		ReadBytes: s.ReadBytes - prev.ReadBytes, ReadTicks: dm.Delta32(prev.ReadTicks, s.ReadTicks),
		WriteIOs: s.WriteIOs - prev.WriteIOs, WriteMerges: delta(prev.WriteMerges, s.WriteMerges),
		WriteBytes: s.WriteBytes - prev.WriteBytes, WriteTicks: dm.Delta32(prev.WriteTicks, s.WriteTicks),
		InFlight: s.InFlight,
		IOTicks:  dm.Delta32(prev.IOTicks, s.IOTicks), TimeInQueue: dm.Delta32(prev.TimeInQueue, s.TimeInQueue),
		DiscardIOs: s.DiscardIOs - prev.DiscardIOs, DiscardMerges: delta(prev.DiscardMerges, s.DiscardMerges),
		DiscardBytes: delta(prev.DiscardBytes, s.DiscardBytes), DiscardTicks: dm.Delta32(prev.DiscardTicks, s.DiscardTicks),
		FlushIOs: s.FlushIOs - prev.FlushIOs, FlushTicks: dm.Delta32(prev.FlushTicks, s.FlushTicks),
	}
}

// delta is c-p for a 64-bit count, or c for one that went down (reset).
func delta(p, c uint64) uint64 {
	if c < p {
		return c
	}
	return c - p
}

// Host implements Interface on the node's real devices.
type Host struct {
	run *command.Runner
}

// NewHost returns the real block-device layer.
func NewHost(run *command.Runner) *Host { return &Host{run: run} }

var _ Interface = (*Host)(nil)

func (h *Host) Resolve(path string) (string, error) { return filepath.EvalSymlinks(path) }

func (h *Host) Signatures(ctx context.Context, path string) ([]Signature, error) {
	out, err := h.run.Run(ctx, "wipefs", "--no-act", "--json", path)
	if err != nil {
		return nil, err
	}
	return ParseWipefs(out)
}

// ParseWipefs parses `wipefs --no-act --json`, which prints nothing at all
// for a blank device.
func ParseWipefs(out []byte) ([]Signature, error) {
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil, nil
	}
	var report struct {
		Signatures []Signature `json:"signatures"`
	}
	if err := json.Unmarshal(out, &report); err != nil {
		return nil, fmt.Errorf("parse wipefs output: %w", err)
	}
	return report.Signatures, nil
}

func (h *Host) Size(ctx context.Context, path string) (uint64, error) {
	out, err := h.run.Run(ctx, "blockdev", "--getsize64", path)
	if err != nil {
		return 0, err
	}
	size, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("blockdev --getsize64 %s: %q: %w", path, out, err)
	}
	return size, nil
}

func (h *Host) DevNum(path string) (dm.DevNum, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return dm.DevNum{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return dm.DevNum{}, fmt.Errorf("%s is not a block device", path)
	}
	return dm.DevNum{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}, nil
}

func (h *Host) ZeroHead(path string, want dm.DevNum, n uint64) error {
	// O_SYNC so the zeros are on the device before dm-cache reads the superblock.
	f, err := openDevice(path, os.O_WRONLY|unix.O_SYNC, want)
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	for written := uint64(0); written < n; {
		chunk := min(n-written, uint64(len(zeros)))
		if _, err := f.WriteAt(zeros[:chunk], int64(written)); err != nil {
			_ = f.Close()
			return fmt.Errorf("zero %s at %d: %w", path, written, err)
		}
		written += chunk
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// Flush syncs the opened device: for a block device the kernel then sends
// the device a cache flush (blkdev_fsync), whoever wrote the data.
func (h *Host) Flush(path string, want dm.DevNum) error {
	f, err := openDevice(path, os.O_RDONLY, want)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("flush %s: %w", path, err)
	}
	return f.Close()
}

func (h *Host) IOStats(num dm.DevNum) (IOStats, error) { return ReadIOStats("/sys", num) }

// ReadIOStats reads device num's counters from sysfs mounted at sysRoot
// (/sys on a node; readable without privilege, from a pod too) with
// prometheus/procfs' blockdevice reader of /sys/block/<dev>/stat
// (Documentation/block/stat.rst): eleven fields on every kernel, four
// discard fields since 4.18 and two flush fields since 5.5.
func ReadIOStats(sysRoot string, num dm.DevNum) (IOStats, error) {
	name, err := sysBlockName(sysRoot, num)
	if err != nil {
		return IOStats{}, err
	}
	// Only sysfs is read: sysRoot stands in for the proc root the reader
	// also wants to exist.
	fs, err := blockdevice.NewFS(sysRoot, sysRoot)
	if err != nil {
		return IOStats{}, err
	}
	st, fields, err := fs.SysBlockDeviceStat(name)
	if err != nil {
		return IOStats{}, fmt.Errorf("block stat of %s (%s): %w", num, name, err)
	}
	if fields < 11 {
		return IOStats{}, fmt.Errorf("block stat of %s (%s): %d fields, want at least 11", num, name, fields)
	}
	return fromProcfs(st), nil
}

// sysBlockName is device num's path under /sys/block, which the
// blockdevice reader takes: its kernel name for a disk or a dm device, and
// <disk>/<partition> for a partition, which /sys/block lists under its disk.
// /sys/dev/block/M:m links to the device's directory, wherever its bus puts
// it (.../block/sda, .../nvme/nvme0/nvme0n1, .../virtual/block/dm-3), and a
// partition's directory sits in its disk's and holds a "partition"
// attribute: one readlink and one stat tell which (the monitor reads every
// volume's devices every second, so no walk of the path).
func sysBlockName(sysRoot string, num dm.DevNum) (string, error) {
	link := filepath.Join(sysRoot, "dev", "block", num.String())
	target, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("device %s in sysfs: %w", num, err)
	}
	name := filepath.Base(target)
	if _, err := os.Stat(filepath.Join(link, "partition")); err == nil {
		return filepath.Join(filepath.Base(filepath.Dir(target)), name), nil
	}
	return name, nil
}

// fromProcfs converts the blockdevice reader's counters: sectors are
// 512-byte units whatever the device's block size.
func fromProcfs(s blockdevice.IOStats) IOStats {
	return IOStats{
		ReadIOs: s.ReadIOs, ReadMerges: s.ReadMerges, ReadBytes: s.ReadSectors * dm.SectorSize, ReadTicks: s.ReadTicks,
		WriteIOs: s.WriteIOs, WriteMerges: s.WriteMerges, WriteBytes: s.WriteSectors * dm.SectorSize, WriteTicks: s.WriteTicks,
		InFlight: s.IOsInProgress, IOTicks: s.IOsTotalTicks, TimeInQueue: s.WeightedIOTicks,
		DiscardIOs: s.DiscardIOs, DiscardMerges: s.DiscardMerges, DiscardBytes: s.DiscardSectors * dm.SectorSize,
		DiscardTicks: s.DiscardTicks, FlushIOs: s.FlushRequestsCompleted, FlushTicks: s.TimeSpentFlushing,
	}
}

func (h *Host) Holders(path string) ([]string, error) {
	node, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join("/sys/class/block", filepath.Base(node), "holders"))
	if err != nil {
		return nil, err
	}
	holders := make([]string, 0, len(entries))
	for _, e := range entries {
		holders = append(holders, e.Name())
	}
	return holders, nil
}

func (h *Host) ProbeRead(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// O_DIRECT needs an aligned buffer: take an aligned window of a larger one.
	raw := make([]byte, 2*probeBytes)
	off := (probeBytes - int(uintptr(unsafe.Pointer(&raw[0]))%probeBytes)) % probeBytes
	_, err = f.ReadAt(raw[off:off+probeBytes], 0) // the error names the path
	return err
}

const probeBytes = 4096

func (h *Host) Wipe(ctx context.Context, path string) error {
	_, err := h.run.Run(ctx, "wipefs", "--all", path)
	return err
}
