package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileLayer is an uncompressed OCI layer backed by a tar file. Layers are
// kept uncompressed: the archives only travel to a local VM, containerd
// imports uncompressed layers, and skipping gzip keeps a warm build fast.
// (go-containerregistry's tarball layers always gzip.)
type fileLayer struct {
	path   string
	digest v1.Hash
	size   int64
}

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
	return &fileLayer{path: p, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, size: n}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                 { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error)  { return types.OCIUncompressedLayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)   { return os.Open(l.path) }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) { return os.Open(l.path) }

// tarArgs are GNU tar's options for layers and archives: PAX format
// (sub-second mtimes) without atime, ctime or a PID in the extended
// headers' names, numeric owners and no padding beyond the end blocks, so
// equal trees give equal bytes.
func tarArgs(dir, out string) []string {
	return []string{"--create", "--file=" + out, "--directory=" + dir, "--format=posix",
		"--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
		"--numeric-owner", "--blocking-factor=1"}
}

// builderTarArgs are tarArgs for files the builder placed itself: the
// members as listed (not their directories' contents), root's and dated
// 1970, so the result depends only on their content and modes.
func builderTarArgs(dir, out string) []string {
	return append(tarArgs(dir, out), "--no-recursion", "--owner=0", "--group=0", "--mtime=@0")
}

// tar runs GNU tar with args, then the members.
func (b *Builder) tar(ctx context.Context, args []string, members ...string) error {
	return run(ctx, b.exec, command{name: "tar", args: append(append(args, "--"), members...)})
}

// writeFilesLayer writes a layer of files (paths in the image, already
// under stage) as 0755 executables after dirs and the files' parent
// directories, which get mode 0755 (Debian's, so the layer does not change
// them in a lower layer) unless dirs says otherwise.
func (b *Builder) writeFilesLayer(ctx context.Context, stage, out string, files []string, dirs map[string]os.FileMode) error {
	modes := map[string]os.FileMode{}
	for _, f := range files {
		for d := path.Dir(f); d != "/"; d = path.Dir(d) {
			modes[d] = 0o755
		}
	}
	maps.Copy(modes, dirs)
	members := slices.Sorted(maps.Keys(modes)) // parents before their children
	members = append(members, files...)
	for i, m := range members {
		p := filepath.Join(stage, m)
		mode, isDir := modes[m]
		if !isDir {
			mode = 0o755
		} else if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		members[i] = m[1:]
	}
	return b.tar(ctx, builderTarArgs(stage, out), members...)
}
