package fileblocks

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIEMAP (linux/fiemap.h), which x/sys/unix does not define.
const (
	fsIocFiemap     = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync  = 0x1        // write dirty data first, so it has a place
	fiemapBatch     = 256        // extents asked for per call
	fiemapHeaderLen = 32
	fiemapExtentLen = 56
)

// Extent flags whose ranges hold no data of the file's own to cache.
const (
	extentLast      = 0x1
	extentUnknown   = 0x2   // location not known (delayed allocation, remote)
	extentDelalloc  = 0x4   // not placed yet
	extentEncoded   = 0x8   // compressed or encrypted: not the bytes read
	extentNotAlign  = 0x100 // packed with other files' data
	extentInline    = 0x200 // in the inode, not in a data block
	extentTail      = 0x400
	extentUnwritten = 0x800 // allocated, reads as zeros without reading
	skipExtent      = extentUnknown | extentDelalloc | extentEncoded | extentNotAlign | extentInline | extentTail | extentUnwritten
)

// fiemapExtent is struct fiemap_extent.
type fiemapExtent struct {
	Logical, Physical, Length uint64
	_                         [2]uint64
	Flags                     uint32
	_                         [3]uint32
}

// fiemapRequest is struct fiemap with room for fiemapBatch extents.
type fiemapRequest struct {
	Start, Length                        uint64
	Flags, MappedExtents, ExtentCount, _ uint32
	Extents                              [fiemapBatch]fiemapExtent
}

var (
	_ [fiemapHeaderLen]byte = [unsafe.Offsetof(fiemapRequest{}.Extents)]byte{}
	_ [fiemapExtentLen]byte = [unsafe.Sizeof(fiemapExtent{})]byte{}
)

// extents gives the device ranges of f's data to the walk's visitor, until
// it stops the walk.
func (w *walk) extents(f *os.File) error {
	req := &fiemapRequest{}
	for start := uint64(0); ; {
		*req = fiemapRequest{Start: start, Length: ^uint64(0) - start, Flags: fiemapFlagSync, ExtentCount: fiemapBatch}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(req)))
		if errno != 0 {
			if errors.Is(errno, unix.EOPNOTSUPP) || errors.Is(errno, unix.ENOTTY) {
				return fmt.Errorf("map %s: the filesystem does not report file extents (FIEMAP): %w", f.Name(), errno)
			}
			return fmt.Errorf("map %s: %w", f.Name(), errno)
		}
		if req.MappedExtents == 0 {
			return nil
		}
		for _, e := range req.Extents[:req.MappedExtents] {
			if e.Flags&skipExtent == 0 && e.Length > 0 {
				if w.add(Extent{Offset: e.Physical, Length: e.Length}) {
					return nil
				}
			}
			if e.Flags&extentLast != 0 {
				return nil
			}
			if e.Logical+e.Length <= start {
				return fmt.Errorf("map %s: the filesystem returned an extent that does not advance (logical %d, length %d)", f.Name(), e.Logical, e.Length)
			}
			start = e.Logical + e.Length
		}
	}
}

// add gives e to the visitor; true once it stopped the walk.
func (w *walk) add(e Extent) bool {
	w.found.Bytes += e.Length
	w.found.Truncated = !w.visitor(e)
	return w.found.Truncated
}
