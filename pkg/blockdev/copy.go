package blockdev

import (
	"context"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// copyChunk is the largest single read and write of CopyExtents: small
// enough that the chunks in flight are neighbours the drive serves as one
// stream, and to stop soon when cancelled.
const copyChunk = 1 << 20

// copyReads is how many chunks a copy or a read of extents keeps in
// flight: a drive serves queued reads back to back, where one read at a
// time leaves it idle between the completion of one and the arrival of the
// next. Eight reads of 1 MiB are the bench's SEQ1M Q8T1, the raw HDD's
// fastest read (1.4 times its Q1 rate); four of 4 MiB copied a 256 MiB hot
// set at 150 MB/s where eight of 1 MiB copied it at 210 MB/s (make bench,
// 25 %, three restages each, the same hour).
const copyReads = 8

// directAlign is what O_DIRECT needs of offsets, lengths and buffers on
// every device ssdcache uses (4Kn disks included).
const directAlign = 4096

// CopyExtents reads the next chunks from src (copyReads at once) while it
// writes the last one to dst, so that a copy from an HDD to an SSD takes
// about as long as the HDD's read alone. src is named by number, as tables
// name their origins.
func (h *Host) CopyExtents(ctx context.Context, src dm.DevNum, dst string, want dm.DevNum, extents []Extent) error {
	path, err := nodeOf(src)
	if err != nil {
		return err
	}
	return copyExtents(ctx, path, src, dst, want, extents)
}

// copyExtents is CopyExtents from path, once checked to be device src.
func copyExtents(ctx context.Context, path string, src dm.DevNum, dst string, want dm.DevNum, extents []Extent) error {
	if err := checkAligned(path, dst, extents); err != nil {
		return err
	}
	in, err := openDevice(path, os.O_RDONLY|unix.O_DIRECT, src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := openDevice(dst, os.O_WRONLY|unix.O_DIRECT, want)
	if err != nil {
		return err
	}
	defer out.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	read := make(chan readChunk, copyReads)
	free := make(chan []byte, copyReads+1)
	for range copyReads + 1 {
		free <- DirectBuffer(copyChunk)
	}
	go readChunks(ctx, in, chunksOf(extents), free, read)
	for c := range read {
		err := c.err
		if err == nil {
			err = writeExtent(ctx, out, Extent{Dst: c.Dst, Length: c.Length}, c.buf)
		}
		if err != nil {
			cancel()
			for range read { // the readers stop; in closes after them
			}
			return err
		}
		free <- c.buf
	}
	if err := ctx.Err(); err != nil {
		return err // the reader stopped early, without an error of its own
	}
	return closeWritten(out)
}

// readChunk is a chunk of an extent read into buf, or the error that ended
// the reading.
type readChunk struct {
	Extent
	buf []byte
	err error
}

// readChunks reads each chunk into a buffer from free and sends it on read,
// copyReads at once, in any order; it closes read when done, failed or
// cancelled.
func readChunks(ctx context.Context, in *os.File, chunks []Extent, free <-chan []byte, read chan<- readChunk) {
	defer close(read)
	eachConcurrently(ctx, chunks, func(c Extent) error {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := readExtent(ctx, in, Extent{Src: c.Src, Length: c.Length}, buf)
		select {
		case read <- readChunk{Extent: c, buf: buf, err: err}:
		case <-ctx.Done():
			return ctx.Err()
		}
		return err
	})
}

// eachConcurrently calls do for every chunk, copyReads at once, until one
// fails or ctx ends, and returns when every call has.
func eachConcurrently(ctx context.Context, chunks []Extent, do func(Extent) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(copyReads)
	for _, c := range chunks {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return do(c) })
	}
	return g.Wait()
}

// chunksOf splits extents into pieces of at most copyChunk bytes.
func chunksOf(extents []Extent) []Extent {
	var chunks []Extent
	for _, e := range extents {
		for done := uint64(0); done < e.Length; done += copyChunk {
			chunks = append(chunks, Extent{Src: e.Src + done, Dst: e.Dst + done, Length: min(e.Length-done, copyChunk)})
		}
	}
	return chunks
}

// nodeOf finds the device node of num from the kernel's own name for it
// (sysfs uevent DEVNAME; devtmpfs creates /dev/<DEVNAME> with or without udev).
func nodeOf(num dm.DevNum) (string, error) {
	uevent := fmt.Sprintf("/sys/dev/block/%d:%d/uevent", num.Major, num.Minor)
	data, err := os.ReadFile(uevent)
	if err != nil {
		return "", fmt.Errorf("device %s: %w", num, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok && name != "" && !strings.Contains(name, "..") {
			return "/dev/" + name, nil
		}
	}
	return "", fmt.Errorf("device %s: no DEVNAME in %s", num, uevent)
}

// readExtent reads e.Length bytes at e.Src of in into buf, a chunk at a
// time, so that a cancelled context stops it soon.
func readExtent(ctx context.Context, in *os.File, e Extent, buf []byte) error {
	for done := uint64(0); done < e.Length; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(e.Length-done, copyChunk)
		if _, err := in.ReadAt(buf[done:done+n], int64(e.Src+done)); err != nil {
			return fmt.Errorf("read %s at %d: %w", in.Name(), e.Src+done, err)
		}
		done += n
	}
	return nil
}

// writeExtent writes the first e.Length bytes of buf to out at e.Dst.
func writeExtent(ctx context.Context, out *os.File, e Extent, buf []byte) error {
	for done := uint64(0); done < e.Length; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(e.Length-done, copyChunk)
		if _, err := out.WriteAt(buf[done:done+n], int64(e.Dst+done)); err != nil {
			return fmt.Errorf("write %s at %d: %w", out.Name(), e.Dst+done, err)
		}
		done += n
	}
	return nil
}

// closeWritten closes a device written with direct I/O without flushing
// its write cache: every write has completed, so the device returns it to
// any reader, and only a power loss could lose it, after which no cache
// metadata is trusted (safety rule 2: the next attach zeroes it and copies
// again). A flush would cost an emulated SSD a tenth of a copy's time.
func closeWritten(out *os.File) error {
	if err := out.Close(); err != nil {
		return fmt.Errorf("close %s: %w", out.Name(), err)
	}
	return nil
}

// checkAligned refuses extents O_DIRECT cannot move.
func checkAligned(src, dst string, extents []Extent) error {
	for _, e := range extents {
		if e.Src%directAlign != 0 || e.Dst%directAlign != 0 || e.Length%directAlign != 0 {
			return fmt.Errorf("copy %s to %s: extent %+v is not aligned to %d bytes", src, dst, e, directAlign)
		}
	}
	return nil
}

// DirectBuffer returns n bytes aligned as direct I/O needs: Go's heap does
// not move objects, so an aligned slice of a larger one stays aligned.
func DirectBuffer(n uint64) []byte {
	b := make([]byte, n+directAlign)
	off := (directAlign - uint64(uintptr(unsafe.Pointer(&b[0])))%directAlign) % directAlign
	return b[off : off+n : off+n]
}

// openDevice opens path and checks that it is device want: a path is a name
// that can change hands (an LV removed and another created under the name),
// while tables refer to numbers.
func openDevice(path string, flag int, want dm.DevNum) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if got := (dm.DevNum{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}); got != want {
		_ = f.Close()
		return nil, fmt.Errorf("%s is device %s, not %s: refusing to write it", path, got, want)
	}
	return f, nil
}
