package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageSpec is the runtime configuration of one image.
type imageSpec struct {
	ref        string
	user       string
	env        []string // beside PATH
	entrypoint []string
	layers     []string // tar files
	history    []string // one "created_by" per layer
}

// defaultPath is the PATH of Debian's images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// assembleImage makes an OCI image (manifest and config media types OCI)
// for linux/amd64 with a fixed creation time, so equal layers give an equal
// image digest.
func assembleImage(spec imageSpec, layers []v1.Layer) (v1.Image, error) {
	epoch := v1.Time{Time: time.Unix(0, 0)}
	cfg := &v1.ConfigFile{
		Architecture: "amd64", OS: "linux", Created: epoch, RootFS: v1.RootFS{Type: "layers"},
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
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, History: v1.History{Created: epoch, CreatedBy: spec.history[i]}}
	}
	return mutate.Append(img, adds...)
}

// writeImage writes spec's image to its archive in o.OutDir; work is a
// scratch directory in o.OutDir.
func (b *Builder) writeImage(ctx context.Context, o Options, work string, spec imageSpec) (Archive, error) {
	start := time.Now()
	layers := make([]v1.Layer, len(spec.layers))
	for i, p := range spec.layers {
		l, err := layoutLayer(p, filepath.Join(work, "layout"))
		if err != nil {
			return Archive{}, err
		}
		layers[i] = l
	}
	img, err := assembleImage(spec, layers)
	if err != nil {
		return Archive{}, err
	}
	out := archivePath(o.OutDir, spec.ref)
	if err := b.writeArchive(ctx, work, out, spec.ref, img); err != nil {
		return Archive{}, fmt.Errorf("writing %s: %w", out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Archive{}, err
	}
	o.Logger.Info("Wrote image archive", "ref", spec.ref, "path", out, "manifest", digest.String(), "duration", time.Since(start).Round(time.Millisecond))
	return Archive{Ref: spec.ref, Path: out}, nil
}

// layoutLayer hashes the layer tar at p and hard-links it into the OCI
// layout at dir, where layout.Write finds the blob instead of copying it
// (it copies where a link is impossible, e.g. across file systems).
func layoutLayer(p, dir string) (v1.Layer, error) {
	l, err := newFileLayer(p)
	if err != nil {
		return nil, err
	}
	blobs := filepath.Join(dir, "blobs", l.digest.Algorithm)
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	_ = os.Link(p, filepath.Join(blobs, l.digest.Hex))
	return l, nil
}

// writeArchive writes img as an OCI image layout in work, then as a tar
// file at out, the format "ctr images import" reads. index.json names the image
// by ref for containerd (which requires the io.containerd.image.name
// annotation) and by its tag for other OCI layout readers.
func (b *Builder) writeArchive(ctx context.Context, work, out, ref string, img v1.Image) error {
	dir := filepath.Join(work, "layout")
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
		Platform: &v1.Platform{Architecture: "amd64", OS: "linux"},
		Annotations: map[string]string{
			"io.containerd.image.name":          ref,
			"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
		},
	}})
	if _, err := layout.Write(dir, idx); err != nil {
		return err
	}
	blobs, err := blobNames(img)
	if err != nil {
		return err
	}
	tmp := filepath.Join(work, "archive.tar") // renamed when complete: no truncated archive under the final name
	members := append(append([]string{"oci-layout"}, blobs...), "index.json")
	// The archive itself is not hashed: tar's default 10 KiB records, three
	// times faster here than the layers' 512-byte ones.
	args := append(builderTarArgs(dir, tmp), "--mode=0644", "--blocking-factor=20")
	if err := b.tar(ctx, args, members...); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// blobNames lists img's blobs in an OCI layout: layers, config, manifest.
func blobNames(img v1.Image) ([]string, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	var names []string
	add := func(h v1.Hash) { names = append(names, "blobs/"+h.Algorithm+"/"+h.Hex) }
	for _, l := range m.Layers {
		add(l.Digest)
	}
	add(m.Config.Digest)
	add(digest)
	return names, nil
}
