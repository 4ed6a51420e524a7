package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations on the index entry. containerd's "ctr images import" names
// the image after io.containerd.image.name; the OCI ref name is the tag,
// as other OCI layout readers expect.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationOCIRefName     = "org.opencontainers.image.ref.name"
)

// imageSpec is the runtime configuration of one image.
type imageSpec struct {
	ref        string
	user       string
	env        []string // beside PATH
	entrypoint []string
	layers     []v1.Layer
	history    []string // one "created_by" per layer
}

// defaultPath is the PATH of Debian's images.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// assembleImage makes an OCI image (manifest and config media types OCI)
// for linux/amd64 with a fixed creation time, so equal layers give an equal
// image digest.
func assembleImage(spec imageSpec) (v1.Image, error) {
	cfg := &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Env:        append([]string{defaultPath}, spec.env...),
			WorkingDir: "/",
			User:       spec.user,
			Entrypoint: spec.entrypoint,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(spec.layers))
	for i, l := range spec.layers {
		adds[i] = mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: spec.history[i]}}
	}
	return mutate.Append(img, adds...)
}

// writeArchive writes img as an OCI image layout in a tar file at out, the
// format "ctr images import" reads. It streams the blobs straight into the
// tar rather than through a layout directory, so each layer is copied once.
func writeArchive(out, ref string, img v1.Image) error {
	index, err := layoutIndex(ref, img)
	if err != nil {
		return err
	}
	return writeAtomically(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		if err := writeTarBytes(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
			return err
		}
		if err := writeImageBlobs(tw, img); err != nil {
			return err
		}
		if err := writeTarBytes(tw, "index.json", index); err != nil {
			return err
		}
		return tw.Close()
	})
}

// layoutIndex is index.json: one manifest, named by ref for containerd.
func layoutIndex(ref string, img v1.Image) ([]byte, error) {
	tag := ref[strings.LastIndex(ref, ":")+1:]
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{
		Add: img,
		Descriptor: v1.Descriptor{
			Platform:    &v1.Platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{annotationContainerdName: ref, annotationOCIRefName: tag},
		},
	})
	return idx.RawManifest()
}

func writeImageBlobs(tw *tar.Writer, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		if err := writeLayerBlob(tw, l); err != nil {
			return err
		}
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := writeBlob(tw, rawConfig); err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	return writeBlob(tw, manifest)
}

func writeLayerBlob(tw *tar.Writer, l v1.Layer) error {
	digest, err := l.Digest()
	if err != nil {
		return err
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := tw.WriteHeader(blobHeader(digest, size)); err != nil {
		return err
	}
	if n, err := io.Copy(tw, rc); err != nil || n != size {
		return fmt.Errorf("layer %s: copied %d of %d bytes: %v", digest, n, size, err)
	}
	return nil
}

func writeBlob(tw *tar.Writer, data []byte) error {
	digest, size, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(blobHeader(digest, size)); err != nil {
		return err
	}
	_, err = tw.Write(data)
	return err
}

func blobHeader(digest v1.Hash, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: "blobs/" + digest.Algorithm + "/" + digest.Hex, Size: size, Mode: 0o644, ModTime: epoch}
}

func writeTarBytes(tw *tar.Writer, name string, data []byte) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(data)), Mode: 0o644, ModTime: epoch}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
