package blockdev

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// copyChunk is the largest single read and write of CopyExtents: large
// enough for an HDD to stream, small enough to stop soon when cancelled.
const copyChunk = 4 << 20

// directAlign is what O_DIRECT needs of offsets, lengths and buffers on
// every device ssdcache uses (4Kn disks included).
const directAlign = 4096

func (h *Host) CopyExtents(ctx context.Context, src, dst string, want dm.DevNum, extents []Extent) error {
	for _, e := range extents {
		if e.Src%directAlign != 0 || e.Dst%directAlign != 0 || e.Length%directAlign != 0 {
			return fmt.Errorf("copy %s to %s: extent %+v is not aligned to %d bytes", src, dst, e, directAlign)
		}
	}
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := openDevice(dst, os.O_WRONLY|unix.O_DIRECT, want)
	if err != nil {
		return err
	}
	defer out.Close()
	// An anonymous mapping is page-aligned, as O_DIRECT wants.
	buf, err := unix.Mmap(-1, 0, copyChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for _, e := range extents {
		for done := uint64(0); done < e.Length; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(e.Length-done, copyChunk)
			if _, err := in.ReadAt(buf[:n], int64(e.Src+done)); err != nil {
				return fmt.Errorf("read %s at %d: %w", src, e.Src+done, err)
			}
			if _, err := out.WriteAt(buf[:n], int64(e.Dst+done)); err != nil {
				return fmt.Errorf("write %s at %d: %w", dst, e.Dst+done, err)
			}
			done += n
		}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dst, err)
	}
	return out.Close()
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
