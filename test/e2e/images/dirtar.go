package images

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// emptiedDirs are kept as empty directories in the rootfs layer: the
// container runtime mounts fresh /dev, /proc, /sys and /run, and the
// device nodes debootstrap creates do not belong in an image.
var emptiedDirs = map[string]bool{"dev": true, "proc": true, "sys": true, "run": true, "tmp": true}

// writeDirLayer writes the tree under root to the tar file out as an image
// layer: numeric owners, modes including setuid bits, symlinks, hard links
// kept as links, and file mtimes as dpkg left them.
func writeDirLayer(root, out string) error {
	return writeAtomically(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		links := map[[2]uint64]string{} // (dev, inode) -> first name, for hard links
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil || rel == "." {
				return err
			}
			if emptiedDirs[filepath.Dir(rel)] || d.Type()&fs.ModeSocket != 0 {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if err := writeTreeEntry(tw, p, filepath.ToSlash(rel), links); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tw.Close()
	})
}

// writeTreeEntry writes one file system object.
func writeTreeEntry(tw *tar.Writer, p, name string, links map[[2]uint64]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	target := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uname, hdr.Gname, hdr.Format = name, "", "", tar.FormatPAX
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{} // deterministic: mtime only
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("no stat information")
	}
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, seen := links[key]; seen {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(hdr)
		}
		links[key] = name
	}
	if hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock || hdr.Typeflag == tar.TypeFifo {
		return nil // device nodes outside /dev are not expected; leave them out
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	return copyFile(tw, p)
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
