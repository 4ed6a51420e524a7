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
	"io"
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
	// Bytes is the length of every extent given to the visitor.
	Bytes uint64
	// Missing are the named paths that do not exist.
	Missing []string
	// Truncated: the visitor stopped the walk.
	Truncated bool
}

// Visitor receives each device range the files' data occupies, in the
// order found; ranges the filesystem has not placed yet (delayed
// allocation), inline or unwritten (read as zeros) are left out. It
// returns false to stop the walk: the caller keeps what it needs, so that
// a walk over millions of small extents holds none of them.
type Visitor func(Extent) bool

// Mapper maps paths inside a device's filesystem to device ranges.
type Mapper interface {
	// Map walks paths (relative to the root of the filesystem mounted
	// from device; a directory stands for every file beneath it) and
	// gives visit the extents of their data.
	Map(ctx context.Context, device dm.DevNum, paths []string, visit Visitor) (Found, error)
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

func (h *Host) Map(ctx context.Context, device dm.DevNum, paths []string, visit Visitor) (Found, error) {
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
	w := walk{ctx: ctx, device: device, visitor: visit}
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

// A walk is bounded, so that a tree a user builds in the volume cannot tie
// up or exhaust the node agent: it visits at most maxEntries files and
// directories, at most maxDepth levels below a named path.
const (
	maxEntries = 100_000
	maxDepth   = 64
)

// ErrTooLarge: a named directory holds more than a walk visits.
var ErrTooLarge = errors.New("too many files to walk")

// walk collects extents under one filesystem root.
type walk struct {
	ctx     context.Context
	device  dm.DevNum
	visitor Visitor
	entries int
	found   Found
}

// named opens p as if the filesystem's root were "/": symlinks resolve
// inside it, and neither they nor ".." leave it or cross into another mount.
func (w *walk) named(rootFD int, p string) error {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(rootFD, path.Clean(p), &how)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		w.found.Missing = append(w.found.Missing, p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %q in the volume: %w", p, err)
	}
	return w.visit(fd, p, 0)
}

// visit maps the file or directory at pathFD (an O_PATH descriptor, which
// it closes). Only once fstat says it is one is it opened for reading,
// through the descriptor itself, so that no device node's driver, FIFO or
// socket is ever opened, even if renamed into place meanwhile.
func (w *walk) visit(pathFD int, name string, depth int) error {
	defer unix.Close(pathFD)
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.entries++; w.entries > maxEntries || depth > maxDepth {
		return fmt.Errorf("%w: the walk stops at %d files and directories, %d levels below a named path (at %q); name smaller directories",
			ErrTooLarge, maxEntries, maxDepth, name)
	}
	var st unix.Stat_t
	if err := unix.Fstat(pathFD, &st); err != nil {
		return fmt.Errorf("stat %q: %w", name, err)
	}
	if uint32(unix.Major(st.Dev)) != w.device.Major || uint32(unix.Minor(st.Dev)) != w.device.Minor {
		return nil // RESOLVE_NO_XDEV keeps this from happening; belt and braces
	}
	kind := st.Mode & unix.S_IFMT
	if kind != unix.S_IFREG && kind != unix.S_IFDIR {
		return nil // holds no data of the filesystem's own to cache
	}
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK
	if kind == unix.S_IFDIR {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pathFD), flags, 0)
	if err != nil {
		return fmt.Errorf("open %q: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if kind == unix.S_IFDIR {
		return w.dir(f, depth)
	}
	w.found.Files++
	return w.extents(f)
}

// dir maps every file beneath d, not following symlinks.
func (w *walk) dir(d *os.File, depth int) error {
	for {
		entries, err := d.ReadDir(1024)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read directory %q: %w", d.Name(), err)
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink != 0 || !(e.Type().IsRegular() || e.IsDir()) {
				continue // visit checks again: the entry may change meanwhile
			}
			how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_SYMLINKS}
			fd, err := unix.Openat2(int(d.Fd()), e.Name(), &how)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EXDEV) {
				continue // removed meanwhile, or a mount point
			}
			if err != nil {
				return fmt.Errorf("open %q: %w", path.Join(d.Name(), e.Name()), err)
			}
			if err := w.visit(fd, path.Join(d.Name(), e.Name()), depth+1); err != nil || w.found.Truncated {
				return err
			}
		}
	}
}
