package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec is the runtime configuration and the layers of one image.
type imageSpec struct {
	ref        string
	arch       string // GOARCH and OCI architecture: amd64, arm64
	user       string
	env        []string // beside PATH
	entrypoint []string
	layers     []v1.Layer
	history    []string // one "created_by" per layer
}

// defaultPath is the PATH of Debian's images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

var epoch = time.Unix(0, 0)

// writeImage writes spec's image to its archive in o.OutDir.
func writeImage(o Options, spec imageSpec) (Archive, error) {
	img, err := assembleImage(spec)
	if err != nil {
		return Archive{}, err
	}
	return writeImages(o, spec.ref, []platformImage{{arch: spec.arch, img: img}})
}

// platformImage is a ref's image for linux/arch.
type platformImage struct {
	arch string
	img  v1.Image
}

// writeImages writes ref's images, one per architecture, to its archive in
// o.OutDir.
func writeImages(o Options, ref string, imgs []platformImage) (Archive, error) {
	start := time.Now()
	out := archivePath(o.OutDir, ref)
	digest, err := writeArchive(out, ref, imgs)
	if err != nil {
		return Archive{}, fmt.Errorf("writing %s: %w", out, err)
	}
	var arches []string
	for _, pi := range imgs {
		arches = append(arches, pi.arch)
	}
	o.Logger.Info("Wrote image archive", "ref", ref, "path", out, "arches", arches, "digest", digest.String(), "duration", time.Since(start).Round(time.Millisecond))
	return Archive{Ref: ref, Path: out}, nil
}

// assembleImage makes an OCI image (manifest and config media types OCI)
// for linux/spec.arch with a fixed creation time, so equal layers give an
// equal image digest.
func assembleImage(spec imageSpec) (v1.Image, error) {
	created := v1.Time{Time: epoch}
	cfg := &v1.ConfigFile{
		Architecture: spec.arch, OS: "linux", Created: created, RootFS: v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env:        append([]string{defaultPath}, spec.env...),
			WorkingDir: "/", User: spec.user, Entrypoint: spec.entrypoint,
		},
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(spec.layers))
	for i, l := range spec.layers {
		adds[i] = mutate.Addendum{Layer: l, History: v1.History{Created: created, CreatedBy: spec.history[i]}}
	}
	return mutate.Append(img, adds...)
}

// uncompressedLayer is an OCI layer of the tar data itself. Layers are kept
// uncompressed: the archives only travel to a local VM, containerd imports
// them as they are, and gzip would add seconds to every warm build
// (go-containerregistry's tarball layers always gzip).
func uncompressedLayer(data []byte) v1.Layer {
	return static.NewLayer(data, types.OCIUncompressedLayer)
}

// imageFile is a host file placed in an image as a 0755 executable.
type imageFile struct{ path, host string }

// filesLayer makes a layer of files after their parent directories (mode
// 0755, Debian's, so that the layer does not change them in a lower layer)
// and dirs (path in the image to mode). Every entry is root's and dated
// 1970, so equal binaries give equal digests.
func filesLayer(files []imageFile, dirs map[string]int64) (v1.Layer, error) {
	modes := map[string]int64{}
	for _, f := range files {
		for d := path.Dir(f.path); d != "/"; d = path.Dir(d) {
			modes[d] = 0o755
		}
	}
	maps.Copy(modes, dirs)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range slices.Sorted(maps.Keys(modes)) { // parents before their children
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: modes[d], ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.host)
		if err != nil {
			return nil, err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: f.path[1:], Mode: 0o755, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return uncompressedLayer(buf.Bytes()), nil
}

// writeArchive writes imgs as an OCI image layout in a tar file at out, the
// format "ctr images import" reads, and returns the digest index.json points
// at. index.json names the image by ref for containerd (which requires the
// io.containerd.image.name annotation) and by its tag for other OCI layout
// readers. One image is listed there itself, with its platform, as the e2e
// has always imported it; several are listed in an image index, one
// manifest per platform, which index.json names (as docker buildx's OCI
// exporter does), so that "ctr images import --platform linux/amd64" unpacks
// the amd64 one and a registry gets the index as the tag.
func writeArchive(out, ref string, imgs []platformImage) (v1.Hash, error) {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".layout-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	names := map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	var platforms []mutate.IndexAddendum
	for _, pi := range imgs {
		platforms = append(platforms, mutate.IndexAddendum{Add: pi.img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{Architecture: pi.arch, OS: "linux"}}})
	}
	var named mutate.IndexAddendum
	switch len(platforms) {
	case 0:
		return v1.Hash{}, fmt.Errorf("no image for %s", ref)
	case 1:
		named = platforms[0]
		named.Descriptor.Annotations = names
	default:
		index := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, platforms...), types.OCIImageIndex)
		named = mutate.IndexAddendum{Add: index, Descriptor: v1.Descriptor{Annotations: names}}
	}
	digest, err := named.Add.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	idx := mutate.AppendManifests(empty.Index, named)
	if _, err := layout.Write(filepath.Join(dir, "layout"), idx); err != nil {
		return v1.Hash{}, err
	}
	tmp := filepath.Join(dir, "archive.tar") // renamed when complete: no truncated archive under the final name
	f, err := os.Create(tmp)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(w)
	if err := errors.Join(tw.AddFS(os.DirFS(filepath.Join(dir, "layout"))), tw.Close(), w.Flush(), f.Close()); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(tmp, out)
}
