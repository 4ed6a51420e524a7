// Package fileblocks finds which byte ranges of a block device hold the
// files a user names inside the filesystem mounted from it: the origin
// ranges a cache must hold for those files to read from the SSD. Paths are
// resolved inside the filesystem only (a symlink or ".." cannot leave it,
// nor can a mount inside it), and extents come from the kernel's FIEMAP.
package fileblocks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// ErrNotMounted: the device has no filesystem mounted where this process
// can see it (a raw block volume, or one not staged on this node).
var ErrNotMounted = errors.New("no filesystem of the device is mounted")

// ErrInvalidPath: a path is absolute, empty or has a ".." component.
var ErrInvalidPath = errors.New("invalid path")

// Extent is a byte range of the device.
type Extent struct{ Offset, Length uint64 }

// Found is what the named paths hold.
type Found struct {
	// Files were mapped (regular files, those under named directories included).
	Files int
	// Extents are the device ranges their data occupies, in the order found;
	// ranges the filesystem has not placed yet (delayed allocation), inline
	// or unwritten (read as zeros) are left out.
	Extents []Extent
	// Missing are the named paths that do not exist.
	Missing []string
	// Truncated: the walk stopped at the byte limit.
	Truncated bool
}

// Bytes is the length of every extent.
func (f Found) Bytes() uint64 {
	var n uint64
	for _, e := range f.Extents {
		n += e.Length
	}
	return n
}

// Mapper maps paths inside a device's filesystem to device ranges.
type Mapper interface {
	// Map finds the extents of paths (relative to the root of the filesystem
	// mounted from device; a directory stands for every file beneath it)
	// until they add up to limit bytes.
	Map(ctx context.Context, device dm.DevNum, paths []string, limit uint64) (Found, error)
}

// Host is the Mapper of the node, reading /proc/self/mountinfo.
type Host struct{ MountInfo string }

// NewHost returns the node's Mapper.
func NewHost() *Host { return &Host{MountInfo: "/proc/self/mountinfo"} }

var _ Mapper = (*Host)(nil)

// CheckPath says why p cannot name something inside a filesystem's root.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty; allowed: a path relative to the volume's root", ErrInvalidPath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w %q: absolute; allowed: a path relative to the volume's root, such as data/index", ErrInvalidPath, p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%w %q: has a \"..\" component; allowed: a path inside the volume", ErrInvalidPath, p)
	}
	return nil
}

func (h *Host) Map(ctx context.Context, device dm.DevNum, paths []string, limit uint64) (Found, error) {
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return Found{}, err
		}
	}
	root, err := h.mountPoint(device)
	if err != nil {
		return Found{}, err
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Found{}, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	w := walk{ctx: ctx, device: device, limit: limit}
	for _, p := range paths {
		if err := w.named(rootFD, p); err != nil {
			return w.found, err
		}
		if w.found.Truncated {
			break
		}
	}
	return w.found, nil
}

// mountPoint is where the filesystem of device is mounted whole (a bind
// mount of one of its directories is not its root).
func (h *Host) mountPoint(device dm.DevNum) (string, error) {
	infos, err := mount.ParseMountInfo(h.MountInfo)
	if err != nil {
		return "", err
	}
	for _, m := range infos {
		if uint32(m.Major) == device.Major && uint32(m.Minor) == device.Minor && m.Root == "/" {
			return m.MountPoint, nil
		}
	}
	return "", fmt.Errorf("device %s: %w", device, ErrNotMounted)
}

// walk collects extents under one filesystem root.
type walk struct {
	ctx    context.Context
	device dm.DevNum
	limit  uint64
	bytes  uint64
	found  Found
}

// named opens p as if the filesystem's root were "/": symlinks resolve
// inside it, and neither they nor ".." leave it or cross into another mount.
func (w *walk) named(rootFD int, p string) error {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFD, path.Clean(p), &how)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		w.found.Missing = append(w.found.Missing, p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %q in the volume: %w", p, err)
	}
	return w.file(os.NewFile(uintptr(fd), p))
}

// file maps f, a regular file or a directory, and closes it; anything else
// (a device node, a socket) holds no data of the filesystem's own.
func (w *walk) file(f *os.File) error {
	defer f.Close()
	if err := w.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if uint32(unix.Major(st.Dev)) != w.device.Major || uint32(unix.Minor(st.Dev)) != w.device.Minor {
		return nil // RESOLVE_NO_XDEV keeps this from happening; belt and braces
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		w.found.Files++
		return w.extents(f)
	case unix.S_IFDIR:
		return w.dir(f)
	}
	return nil
}

// dir maps every file beneath d, not following symlinks.
func (w *walk) dir(d *os.File) error {
	entries, err := d.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", d.Name(), err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 || !(e.Type().IsRegular() || e.IsDir()) {
			continue
		}
		how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS}
		fd, err := unix.Openat2(int(d.Fd()), e.Name(), &how)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EXDEV) {
			continue // removed meanwhile, or a mount point
		}
		if err != nil {
			return fmt.Errorf("open %s/%s: %w", d.Name(), e.Name(), err)
		}
		if err := w.file(os.NewFile(uintptr(fd), path.Join(d.Name(), e.Name()))); err != nil {
			return err
		}
		if w.found.Truncated {
			return nil
		}
	}
	return nil
}
