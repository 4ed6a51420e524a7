package bench

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// TargetKind says what a target path is.
type TargetKind string

const (
	KindBlock   TargetKind = "block"
	KindFile    TargetKind = "file"
	KindDir     TargetKind = "directory"
	KindMissing TargetKind = "missing"
	KindOther   TargetKind = "other"
)

// TargetInfo is what the benchmark needs to know about a target before it runs.
type TargetInfo struct {
	Kind TargetKind
	Size int64
	// MemoryFS names the filesystem of a directory when it keeps files in
	// memory (tmpfs, ramfs): it accepts O_DIRECT, but reads measure RAM.
	MemoryFS string
}

// TargetInspector looks at a target path.
type TargetInspector interface {
	Inspect(path string) (TargetInfo, error)
}

// OSInspector inspects paths on the local machine.
type OSInspector struct{}

// Inspect stats path; a block device's size is found by seeking to its end,
// which works for every block device without an ioctl.
func (OSInspector) Inspect(path string) (TargetInfo, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return TargetInfo{Kind: KindMissing}, nil
	}
	if err != nil {
		return TargetInfo{}, err
	}
	switch {
	case st.Mode().IsRegular():
		return TargetInfo{Kind: KindFile, Size: st.Size()}, nil
	case st.IsDir():
		return TargetInfo{Kind: KindDir, MemoryFS: memoryFS(path)}, nil
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		size, err := blockDeviceSize(path)
		return TargetInfo{Kind: KindBlock, Size: size}, err
	default:
		return TargetInfo{Kind: KindOther}, nil
	}
}

// memoryFS is "tmpfs" or "ramfs" for a directory on one, else "" (also
// when statfs fails: the layout then finds out what is wrong).
func memoryFS(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return ""
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	}
	return ""
}

func blockDeviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, fmt.Errorf("finding the size of %s: %w", path, err)
	}
	return size, nil
}

// prefillNeeded decides whether a target must be laid out before the runs, and
// refuses targets the plan cannot use. Only files are laid out: a block
// device's blocks are read as they are, and read-only mode never writes.
func prefillNeeded(t Target, info TargetInfo, span int64, readOnly bool) (bool, error) {
	switch info.Kind {
	case KindBlock:
		if info.Size < span {
			return false, fmt.Errorf("target %s: block device %s has %d bytes; the working sets need %d", t.Name, t.Path, info.Size, span)
		}
		return false, nil
	case KindFile, KindMissing:
		if info.Size >= span {
			return false, nil
		}
		if readOnly {
			return false, fmt.Errorf("target %s: file %s has %d bytes; read-only mode needs an existing file of at least %d bytes", t.Name, t.Path, info.Size, span)
		}
		return true, nil
	case KindDir:
		return false, fmt.Errorf("target %s: %s is a directory; directories are read by the test %s alone (-tests %s)", t.Name, t.Path, TreeTest.ID, TreeTest.ID)
	default:
		return false, fmt.Errorf("target %s: %s is neither a block device nor a regular file", t.Name, t.Path)
	}
}
