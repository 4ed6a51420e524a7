// Package blockdevfake is an in-memory block-device layer for unit tests.
package blockdevfake

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/blockdev"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Device is one fake block device.
type Device struct {
	Node       string // what Resolve returns, e.g. /dev/sdb
	Size       uint64
	DevNum     dm.DevNum
	Signatures []blockdev.Signature
	// Holders are the devices stacked on this one (e.g. dm-3).
	Holders []string
	// What Disks reports for device selectors.
	Model                 string
	Rotational, Partition bool
}

// Devices is a fake blockdev.Interface keyed by the path callers use
// (usually a /dev/disk/by-id link).
type Devices struct {
	mu      sync.Mutex
	devices map[string]*Device
	// Zeroed records ZeroHead calls as "path:bytes".
	Zeroed []string
	// Copied records CopyExtents calls.
	Copied []string
	// Record, when set, receives every write, to merge with other fakes' logs.
	Record func(event string)
	// Stats are the IOStats returned per device number.
	Stats map[dm.DevNum]blockdev.IOStats
	// Failing lists paths whose reads fail, as a dead SSD's would.
	Failing map[string]bool
	// Hung holds copies into a path until its channel closes, as a write
	// to a device that stopped answering waits.
	Hung map[string]chan struct{}
}

// New returns an empty fake.
func New() *Devices {
	return &Devices{devices: map[string]*Device{}, Stats: map[dm.DevNum]blockdev.IOStats{}, Failing: map[string]bool{}}
}

var (
	_ blockdev.Interface = (*Devices)(nil)
	_ blockdev.Inventory = (*Devices)(nil)
)

// Add registers a device under path (and under its node name).
func (f *Devices) Add(path string, d Device) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dev := d
	f.devices[path] = &dev
	if d.Node != "" {
		f.devices[d.Node] = &dev
	}
}

// Remove unplugs the device registered under path, with every other path
// of it.
func (f *Devices) Remove(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.devices[path]
	if !ok {
		return
	}
	for p, other := range f.devices {
		if other == d {
			delete(f.devices, p)
		}
	}
}

// Disks lists the devices registered under a /dev/disk/by-id path, one per
// node, as the host's inventory groups links.
func (f *Devices) Disks() ([]blockdev.Disk, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	byNode := map[string]*blockdev.Disk{}
	for path, d := range f.devices {
		if !strings.HasPrefix(path, "/dev/disk/by-id/") {
			continue
		}
		node := d.Node
		if node == "" {
			node = path
		}
		disk, ok := byNode[node]
		if !ok {
			disk = &blockdev.Disk{Node: node, Size: d.Size, Model: d.Model, Rotational: d.Rotational, Partition: d.Partition,
				DeviceMapper: strings.HasPrefix(filepath.Base(node), "dm-")}
			byNode[node] = disk
		}
		disk.Links = append(disk.Links, path)
	}
	disks := make([]blockdev.Disk, 0, len(byNode))
	for _, d := range byNode {
		slices.Sort(d.Links)
		disks = append(disks, *d)
	}
	slices.SortFunc(disks, func(a, b blockdev.Disk) int { return strings.Compare(a.Node, b.Node) })
	return disks, nil
}

func (f *Devices) get(path string) (*Device, error) {
	d, ok := f.devices[path]
	if !ok {
		return nil, fmt.Errorf("%s: %w", path, os.ErrNotExist)
	}
	return d, nil
}

func (f *Devices) Resolve(path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return "", err
	}
	if d.Node == "" {
		return path, nil
	}
	return d.Node, nil
}

func (f *Devices) Signatures(_ context.Context, path string) ([]blockdev.Signature, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return nil, err
	}
	return append([]blockdev.Signature(nil), d.Signatures...), nil
}

func (f *Devices) Size(_ context.Context, path string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return 0, err
	}
	return d.Size, nil
}

func (f *Devices) DevNum(path string) (dm.DevNum, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return dm.DevNum{}, err
	}
	return d.DevNum, nil
}

// Flush records the flush as "flush <path>"; like ZeroHead it accepts
// paths it does not know.
func (f *Devices) Flush(path string, want dm.DevNum) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.devices[path]; ok && !d.DevNum.IsZero() && d.DevNum != want {
		return fmt.Errorf("%s is device %s, not %s: refusing to flush it", path, d.DevNum, want)
	}
	if f.Record != nil {
		f.Record("flush " + path)
	}
	return nil
}

// ZeroHead records the write; paths it does not know (LVs) are accepted,
// as LV nodes are owned by the LVM fake.
func (f *Devices) ZeroHead(path string, want dm.DevNum, n uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.devices[path]; ok && !d.DevNum.IsZero() && d.DevNum != want {
		return fmt.Errorf("%s is device %s, not %s: refusing to zero it", path, d.DevNum, want)
	}
	event := fmt.Sprintf("%s:%d", path, n)
	f.Zeroed = append(f.Zeroed, event)
	if f.Record != nil {
		f.Record("zero " + event)
	}
	return nil
}

func (f *Devices) Wipe(_ context.Context, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return err
	}
	d.Signatures = nil
	if f.Record != nil {
		f.Record("wipe " + path)
	}
	return nil
}

func (f *Devices) IOStats(num dm.DevNum) (blockdev.IOStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.Stats[num]
	if !ok {
		return blockdev.IOStats{}, fmt.Errorf("no stats for %s: %w", num, os.ErrNotExist)
	}
	return st, nil
}

func (f *Devices) ProbeRead(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Failing[path] {
		return fmt.Errorf("read %s: input/output error", path)
	}
	return nil
}

func (f *Devices) Holders(path string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(path)
	if err != nil {
		return nil, err
	}
	return d.Holders, nil
}

// CopyExtents records the copy as "copy <major:minor>->dst <n> extents <bytes> bytes".
func (f *Devices) CopyExtents(ctx context.Context, src dm.DevNum, dst string, want dm.DevNum, extents []blockdev.Extent) error {
	if err := ctx.Err(); err != nil {
		return err // as the host's copy, which checks between its reads
	}
	return f.transfer("copy", src.String(), dst, want, extents)
}

func (f *Devices) transfer(op, src, dst string, want dm.DevNum, extents []blockdev.Extent) error {
	f.mu.Lock()
	hung := f.Hung[dst]
	f.mu.Unlock()
	if hung != nil {
		<-hung
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.devices[dst]; ok && !d.DevNum.IsZero() && d.DevNum != want {
		return fmt.Errorf("%s is device %s, not %s: refusing to write it", dst, d.DevNum, want)
	}
	if f.Failing[src] {
		return fmt.Errorf("read %s: input/output error", src)
	}
	var n uint64
	for _, e := range extents {
		n += e.Length
	}
	event := fmt.Sprintf("%s %s->%s %d extents %d bytes", op, src, dst, len(extents), n)
	f.Copied = append(f.Copied, event)
	if f.Record != nil {
		f.Record(event)
	}
	return nil
}
