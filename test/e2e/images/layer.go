package images

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileLayer is an uncompressed OCI layer backed by a tar file. Layers are
// kept uncompressed: the archives only travel to a local VM, containerd
// imports uncompressed layers, and skipping gzip keeps a warm build fast.
type fileLayer struct {
	path   string
	digest v1.Hash
	size   int64
}

var _ v1.Layer = (*fileLayer)(nil)

// newFileLayer hashes the tar file at p once; digest and diff ID are equal
// because the blob is the uncompressed tar itself.
func newFileLayer(p string) (*fileLayer, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("hashing layer %s: %w", p, err)
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	return &fileLayer{path: p, digest: digest, size: n}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }

// layerFile is one regular file placed into a layer from the host.
type layerFile struct {
	src  string // host path
	dest string // absolute path in the image
	mode int64
}

// epoch is the timestamp of every entry the builder creates itself, so the
// binaries layer depends only on the binaries.
var epoch = time.Unix(0, 0)

// writeFilesLayer writes a layer with files (and dirs, e.g. "/tmp" with
// mode 01777) to the tar file out. Parent directories get root:root 0755,
// matching Debian's, so the layer does not change them in a lower layer.
func writeFilesLayer(out string, files []layerFile, dirs map[string]int64) error {
	return writeAtomically(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		allDirs := map[string]int64{}
		for _, f := range files {
			addParents(allDirs, f.dest)
		}
		for d, mode := range dirs {
			addParents(allDirs, d)
			allDirs[strings.Trim(d, "/")] = mode
		}
		if err := writeDirEntries(tw, allDirs); err != nil {
			return err
		}
		for _, f := range files {
			if err := writeHostFile(tw, f); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

func addParents(dirs map[string]int64, p string) {
	for d := path.Dir(strings.Trim(p, "/")); d != "." && d != ""; d = path.Dir(d) {
		if _, ok := dirs[d]; !ok {
			dirs[d] = 0o755
		}
	}
}

func writeDirEntries(tw *tar.Writer, dirs map[string]int64) error {
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names) // parents sort before their children
	for _, d := range names {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d], ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	return nil
}

func writeHostFile(tw *tar.Writer, f layerFile) error {
	src, err := os.Open(f.src)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", f.src)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.Trim(f.dest, "/"), Mode: f.mode, Size: st.Size(), ModTime: epoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// writeAtomically writes out through a temporary file in the same
// directory and renames it into place, so a crash or a concurrent build
// never leaves a truncated file under the final name.
func writeAtomically(out string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	buffered := bufio.NewWriterSize(tmp, 1<<20)
	if err = write(buffered); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err = buffered.Flush(); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600; others read the cache
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}
