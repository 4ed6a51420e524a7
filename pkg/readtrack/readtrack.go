// Package readtrack records which origin blocks a volume's cache missed:
// the reads that dm-cache sent on to the HDD. The promoter copies exactly
// those blocks into the cache, so what it promotes, and what the node
// spends on finding it, follow the data read, not the size of the volume,
// the cache or the machine.
//
// The kernel implementation (Kernel) attaches a small BPF program per
// volume to the block layer's block_bio_remap tracepoint: device-mapper
// fires it for every bio a target sends on, with the top device and the
// device below. A read remapped from the volume's device to its origin
// is a miss (a hit goes to the cache's data LV); the program adds the
// origin block it falls in to a hash map of at most MaxBlocksPerTake
// entries, which Take drains. dm-cache splits bios at its block
// boundaries, so one remapped bio lies in one block.
package readtrack

import (
	"context"
	"errors"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// ErrNotTracked is returned by Take for a device that Track was not
// called for (or Untrack was): after a restart of the plugin, for one.
var ErrNotTracked = errors.New("the device's missed reads are not tracked")

// MaxBlocksPerTake bounds the blocks recorded for one device between two
// Takes: the kernel's map holds at most this many. The promoter takes
// them twice a second; 65,536 blocks of 256 KiB are 16 GiB of distinct
// misses in half a second, far beyond any HDD, so nothing is lost in use,
// and a device's map costs at most about 6.5 MB of kernel memory
// (MaxBlocksPerTake x about 100 bytes an entry, allocated as entries are
// added; nothing per CPU), whatever the device's or the cache's size.
const MaxBlocksPerTake = 1 << 16

// Volume names what one tracked device-mapper device remaps a miss from
// and to.
type Volume struct {
	// Device is the volume's device (the one the filesystem is on).
	Device dm.DevNum
	// Origin is the device its cache sends misses to.
	Origin dm.DevNum
	// BlockSectors is the cache's block size: misses are recorded as
	// origin blocks of this size.
	BlockSectors uint64
}

// Interface records the missed reads of device-mapper devices, by name.
type Interface interface {
	// Track starts recording the reads that name's table sends to
	// v.Origin. Tracking that already records v keeps what it recorded;
	// tracking of other parameters is replaced.
	Track(ctx context.Context, name string, v Volume) error
	// Take returns the origin blocks that reads missed since the previous
	// Take (unsorted, once each; at most MaxBlocksPerTake), or
	// ErrNotTracked.
	Take(ctx context.Context, name string) ([]uint64, error)
	// Untrack stops recording name's misses; a name not tracked is no
	// error.
	Untrack(ctx context.Context, name string) error
}
