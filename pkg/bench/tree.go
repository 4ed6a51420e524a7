package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The application-load profile times what a user waits for: an application
// reading its tree of files from start to end, as a game's load screen or a
// service's start does. Its test reads every file of a tree laid out in a
// directory target (a mounted filesystem), in path order, and counts as one
// pass over the working set like the block tests.

// TreeTest reads the whole tree once, one file after another, in reads of
// up to BlockSize. fio cannot be used: it reads only whole blocks of a file
// and skips files smaller than its block size.
var TreeTest = Test{ID: "tree-read", Label: "TREE read", BlockSize: 1 << 20, QueueDepth: 1, Direction: Read, Tree: true}

// TreeFile is one file of a tree, its path relative to the tree's root.
type TreeFile struct {
	Path string
	Size int64
}

// File sizes are log-uniform between these bounds, so a tree holds many
// small files and some large ones: a 128 MiB working set is about 1,800
// files, mean size about 74 KiB.
const (
	minTreeFile  = 512
	maxTreeFile  = 512 << 10
	filesPerDir  = 32
	dirsPerLevel = 16
)

// PlanTree returns the files of the tree of the given total size, the same
// for the same size and seed: names, sizes and order (the order they are
// written and read in).
func PlanTree(bytes int64, seed uint64) []TreeFile {
	rng := rand.New(rand.NewPCG(seed, uint64(bytes)))
	logMin, logMax := math.Log(minTreeFile), math.Log(maxTreeFile)
	var files []TreeFile
	for left := bytes; left > 0; {
		size := min(left, int64(math.Exp(logMin+rng.Float64()*(logMax-logMin))))
		// Fixed widths keep path order the plan's up to a million files.
		i := len(files)
		dir := fmt.Sprintf("d%03d/d%02d", i/(filesPerDir*dirsPerLevel), i/filesPerDir%dirsPerLevel)
		files = append(files, TreeFile{Path: fmt.Sprintf("%s/f%06d.bin", dir, i), Size: size})
		left -= size
	}
	return files
}

// treeRoot is where a working set's tree lives inside a directory target;
// the version changes with the plan's names or the files' content.
func treeRoot(t Target, ws WorkingSet, seed uint64) string {
	return filepath.Join(t.Path, fmt.Sprintf("ssdcache-bench-tree-v2-%d-%d", ws.Bytes, seed))
}

// TreeFS lays out and reads trees on the local machine's filesystems.
type TreeFS interface {
	// Missing lists the files of plan under root that are absent or of
	// another size; a tree whose layout completed is known by a marker, so
	// that looking at it reads none of its metadata before run 1.
	Missing(root string, plan []TreeFile) ([]TreeFile, error)
	// Write writes the missing files of plan under root, makes them
	// durable, then marks the layout complete.
	Write(ctx context.Context, root string, plan, missing []TreeFile) error
	// Read reads every file of plan under root, bypassing the page cache.
	Read(ctx context.Context, root string, plan []TreeFile, blockSize int64) (Measurement, error)
}

// OSTreeFS is TreeFS on the local filesystems.
type OSTreeFS struct{}

// ErrNoDirectIO means the filesystem refuses O_DIRECT: a tree read through
// the page cache would measure memory, not the disks.
var ErrNoDirectIO = errors.New("the filesystem does not support O_DIRECT reads; the tree needs a disk-backed filesystem")

// layoutMarker, in a tree's root, holds the digest of the plan whose
// layout completed.
const layoutMarker = ".layout"

func planDigest(plan []TreeFile) []byte {
	h := sha256.New()
	for _, f := range plan {
		fmt.Fprintf(h, "%s %d\n", f.Path, f.Size)
	}
	return []byte(hex.EncodeToString(h.Sum(nil)))
}

// Missing trusts a marker of the same plan, else stats every file.
func (OSTreeFS) Missing(root string, plan []TreeFile) ([]TreeFile, error) {
	if marker, err := os.ReadFile(filepath.Join(root, layoutMarker)); err == nil && bytes.Equal(marker, planDigest(plan)) {
		return nil, nil
	}
	var missing []TreeFile
	for _, f := range plan {
		st, err := os.Stat(filepath.Join(root, f.Path))
		switch {
		case errors.Is(err, os.ErrNotExist) || (err == nil && (!st.Mode().IsRegular() || st.Size() != f.Size)):
			missing = append(missing, f)
		case err != nil:
			return nil, err
		}
	}
	return missing, nil
}

// Write gives every file content of its own (no two files share a block a
// cache could deduplicate or a disk compress), syncs the filesystem, and
// only then writes the marker.
func (OSTreeFS) Write(ctx context.Context, root string, plan, missing []TreeFile) error {
	buf := make([]byte, maxTreeFile)
	for _, f := range missing {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		content := buf[:f.Size]
		_, _ = rand.NewChaCha8(sha256.Sum256([]byte(f.Path))).Read(content)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return err
		}
	}
	if err := syncFS(root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, layoutMarker), planDigest(plan), 0o644); err != nil {
		return err
	}
	return syncFS(root)
}

func syncFS(root string) error {
	d, err := os.Open(root)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", root, err)
	}
	return nil
}

// Read opens every file with O_DIRECT and reads it to its end; the
// latencies are those of single reads, the runtime that of the whole tree,
// opens included, as the application waits for both.
func (OSTreeFS) Read(ctx context.Context, root string, plan []TreeFile, blockSize int64) (Measurement, error) {
	buf := alignedBuffer(int(blockSize))
	var lat []time.Duration
	var total int64
	start := time.Now()
	for _, f := range plan {
		if err := ctx.Err(); err != nil {
			return Measurement{}, err
		}
		n, err := readDirect(filepath.Join(root, f.Path), buf, &lat)
		if err != nil {
			return Measurement{}, err
		}
		if n != f.Size {
			return Measurement{}, fmt.Errorf("tree file %s: read %d bytes, the plan says %d: the tree changed after its layout; remove %s to lay it out again", f.Path, n, f.Size, root)
		}
		total += n
	}
	elapsed := time.Since(start)
	if total == 0 || len(lat) == 0 {
		return Measurement{}, errors.New("the tree holds no data")
	}
	slices.Sort(lat)
	return Measurement{
		MBps: float64(total) / 1e6 / elapsed.Seconds(), IOPS: float64(len(lat)) / elapsed.Seconds(),
		LatP50us: micros(lat[len(lat)/2]), LatP99us: micros(lat[len(lat)*99/100]),
		IOBytes: total, RuntimeMs: elapsed.Milliseconds(), Files: len(plan),
	}, nil
}

func readDirect(path string, buf []byte, lat *[]time.Duration) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if errors.Is(err, syscall.EINVAL) {
		return 0, fmt.Errorf("%s: %w", path, ErrNoDirectIO)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		began := time.Now()
		n, err := f.Read(buf)
		if n > 0 { // the last read only finds the end
			*lat = append(*lat, time.Since(began))
		}
		total += int64(n)
		switch {
		case errors.Is(err, io.EOF):
			return total, nil
		case errors.Is(err, syscall.EINVAL):
			return total, fmt.Errorf("%s: %w", path, ErrNoDirectIO)
		case err != nil:
			return total, err
		}
	}
}

// alignedBuffer is a buffer whose start is aligned for O_DIRECT (4 KiB
// covers every logical block size in use).
func alignedBuffer(size int) []byte {
	const align = 4096
	raw := make([]byte, size+align)
	off := (align - int(uintptr(unsafe.Pointer(&raw[0]))%align)) % align
	return raw[off : off+size]
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
