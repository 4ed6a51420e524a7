// Package mounter is the node's filesystem seam: format, mount, bind, resize
// and statfs, behind one interface so the CSI node server tests without root.
package mounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	mount "k8s.io/mount-utils"
	"k8s.io/utils/exec"
)

// ErrNoFilesystem is returned by MountExisting for a device that holds no
// filesystem blkid recognises (blank, or data such as a raw database).
var ErrNoFilesystem = errors.New("no filesystem found")

// FSStats is what statfs says about a mounted filesystem.
type FSStats struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// Interface is everything the CSI node server does to filesystems and paths.
type Interface interface {
	// FormatAndMount creates fstype on source if it holds no filesystem and
	// mounts it on target; a device with another filesystem or a partition
	// table is never formatted.
	FormatAndMount(source, target, fstype string, options []string) error
	// MountExisting mounts the filesystem source already holds and never
	// formats: ErrNoFilesystem when blkid recognises none.
	MountExisting(source, target, fstype string, options []string) error
	// BindMount makes source (a directory or a device node) visible at target.
	BindMount(source, target string, readOnly bool) error
	// Unmount unmounts target if it is a mount point.
	Unmount(target string) error
	// MountRefs lists the other places where what is mounted at path is mounted too.
	MountRefs(path string) ([]string, error)
	// IsMountPoint reports whether path is a mount point; fs.ErrNotExist if it does not exist.
	IsMountPoint(path string) (bool, error)
	// MountedFrom reports whether path is a mount point of device (symlinks
	// resolved on both sides), and what is mounted there.
	MountedFrom(path, device string) (same bool, source string, err error)
	MakeDir(path string) error
	MakeFile(path string) error
	// Remove deletes an empty directory or a file; a missing path is not an error.
	Remove(path string) error
	// Stat reports whether path exists and whether it is a directory.
	Stat(path string) (exists, isDir bool, err error)
	// ResizeFS grows the filesystem on device, mounted at mountPath, to the device's size.
	ResizeFS(device, mountPath string) error
	FSStats(path string) (FSStats, error)
}

// Paths creates, removes and stats the directories and files a CO hands
// over. It is plain file-system work, shared by Host and the test fake.
type Paths struct{}

func (Paths) MakeDir(path string) error { return os.MkdirAll(path, 0o750) }

func (Paths) MakeFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return err
	}
	return f.Close()
}

func (Paths) Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (Paths) Stat(path string) (exists, isDir bool, err error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, fi.IsDir(), nil
}

// Host implements Interface on the node.
type Host struct {
	Paths
	sfm    *mount.SafeFormatAndMount
	resize *mount.ResizeFs
}

// NewHost returns the real mounter.
func NewHost(e exec.Interface) *Host {
	return &Host{
		sfm:    &mount.SafeFormatAndMount{Interface: mount.New(""), Exec: e},
		resize: mount.NewResizeFs(e),
	}
}

var _ Interface = (*Host)(nil)

func (h *Host) FormatAndMount(source, target, fstype string, options []string) error {
	return h.sfm.FormatAndMount(source, target, fstype, options)
}

func (h *Host) MountExisting(source, target, fstype string, options []string) error {
	have, err := h.sfm.GetDiskFormat(source)
	if err != nil {
		return err
	}
	if have == "" {
		return fmt.Errorf("%s: %w", source, ErrNoFilesystem)
	}
	if have != fstype {
		return fmt.Errorf("%s holds %s, not %s", source, have, fstype)
	}
	return h.sfm.Mount(source, target, fstype, options)
}

func (h *Host) MountedFrom(path, device string) (bool, string, error) {
	source, refs, err := mount.GetDeviceNameFromMount(h.sfm.Interface, path)
	if err != nil || refs == 0 {
		return false, source, err
	}
	resolve := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	return resolve(source) == resolve(device), source, nil
}

func (h *Host) BindMount(source, target string, readOnly bool) error {
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	return h.sfm.Mount(source, target, "", opts)
}

func (h *Host) Unmount(target string) error {
	mounted, err := h.IsMountPoint(target)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !mounted) {
		return nil
	}
	if err != nil {
		return err
	}
	return h.sfm.Unmount(target)
}

func (h *Host) MountRefs(path string) ([]string, error) { return h.sfm.GetMountRefs(path) }

func (h *Host) IsMountPoint(path string) (bool, error) {
	if _, err := os.Stat(path); err != nil {
		return false, err
	}
	return h.sfm.IsMountPoint(path)
}

func (h *Host) ResizeFS(device, mountPath string) error {
	if _, err := h.resize.Resize(device, mountPath); err != nil {
		return fmt.Errorf("resize filesystem on %s at %s: %w", device, mountPath, err)
	}
	return nil
}

func (h *Host) FSStats(path string) (FSStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FSStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bsize := int64(st.Bsize)
	return FSStats{
		TotalBytes:     int64(st.Blocks) * bsize,
		AvailableBytes: int64(st.Bavail) * bsize,
		UsedBytes:      int64(st.Blocks-st.Bfree) * bsize,
		TotalInodes:    int64(st.Files),
		FreeInodes:     int64(st.Ffree),
		UsedInodes:     int64(st.Files - st.Ffree),
	}, nil
}
