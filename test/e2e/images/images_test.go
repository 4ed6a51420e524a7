package images

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"k8s.io/klog/v2/ktesting"
)

// TestBinaryImage builds a single-binary image: an OCI layout that ctr
// imports under its ref, with the binary at the entrypoint and /tmp.
func TestBinaryImage(t *testing.T) {
	const ref = "localhost/ssdcache/pause:e2e"
	outDir, pause := t.TempDir(), filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pause, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	archives, err := Build(context.Background(), Options{OutDir: outDir, Logger: ktesting.NewLogger(t, ktesting.DefaultConfig),
		Binaries: []BinaryImage{{Ref: ref, Binary: pause, Entrypoint: []string{"/pause"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != 1 || archives[0].Ref != ref || filepath.Dir(archives[0].Path) != outDir {
		t.Fatalf("archives %+v, want one for %s in %s", archives, ref, outDir)
	}
	img := readArchive(t, archives[0].Path, ref)
	checkConfig(t, img, "", nil, []string{"/pause"})
	files, _ := imageFiles(t, img)
	if h := files["pause"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Size != 4 {
		t.Errorf("/pause entry %+v, want a root-owned 0755 regular file", h)
	}
	if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("/tmp entry %+v, want a 01777 directory", h)
	}
}

// readArchive unpacks an archive as ctr would read it, an OCI layout with
// one linux/amd64 image named ref, and returns the image.
func readArchive(t *testing.T, archive, ref string) v1.Image {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", archive, err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil || len(manifest.Manifests) != 1 {
		t.Fatalf("index.json: %v, want one manifest: %+v", err, manifest)
	}
	desc := manifest.Manifests[0]
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if a := desc.Annotations; a["io.containerd.image.name"] != ref || a["org.opencontainers.image.ref.name"] != tag {
		t.Errorf("index annotations %v, want io.containerd.image.name=%s (ctr names the image by it) and org.opencontainers.image.ref.name=%s", a, ref, tag)
	}
	if desc.MediaType != types.OCIManifestSchema1 || desc.Platform == nil || desc.Platform.Architecture != "amd64" || desc.Platform.OS != "linux" {
		t.Errorf("index entry %+v, want an OCI manifest for linux/amd64", desc)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// Manifest and config; validate.Image would gunzip the layers, and the
	// e2e's import checks their digests.
	if err := validate.Image(img, validate.Fast); err != nil {
		t.Fatalf("image %s: %v", desc.Digest, err)
	}
	return img
}

func checkConfig(t *testing.T, img v1.Image, user string, env, entrypoint []string) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	c := cfg.Config
	wantEnv := append([]string{defaultPath}, env...)
	if c.User != user || !reflect.DeepEqual(c.Entrypoint, entrypoint) || c.WorkingDir != "/" || !reflect.DeepEqual(c.Env, wantEnv) {
		t.Errorf("config %+v, want user %q, entrypoint %q, WorkingDir / and Env %q", c, user, entrypoint, wantEnv)
	}
}

// imageFiles reads the image's file system (later layers win): every
// entry's header by path without the leading slash, and the content of the
// files named in read.
func imageFiles(t *testing.T, img v1.Image, read ...string) (map[string]*tar.Header, map[string]string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	headers, contents := map[string]*tar.Header{}, map[string]string{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, contents
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		headers[name] = hdr
		for _, r := range read {
			if r == name {
				data, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				contents[name] = string(data)
			}
		}
	}
}

// TestArchiveOfSeveralArchitectures: an image of several architectures is
// one archive whose index.json names an image index (ctr imports it by that
// name and unpacks the platform asked for), listing one manifest per
// linux/<arch>, each with its own config and layers.
func TestArchiveOfSeveralArchitectures(t *testing.T) {
	const ref = "docker.io/ssdcache/ssdcache:1.2.3"
	o := Options{OutDir: t.TempDir(), Logger: ktesting.NewLogger(t, ktesting.DefaultConfig)}
	var imgs []platformImage
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(t.TempDir(), "ssdcache-node")
		if err := os.WriteFile(bin, []byte("binary for "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		layer, err := filesLayer([]imageFile{{"/usr/local/bin/ssdcache-node", bin}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		img, err := assembleImage(imageSpec{ref: ref, arch: arch, entrypoint: []string{"/usr/local/bin/ssdcache-node"},
			layers: []v1.Layer{layer}, history: []string{"binary"}})
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, platformImage{arch: arch, img: img})
	}
	a, err := writeImages(o, ref, imgs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", a.Path, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", a.Path, err, out)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := top.IndexManifest()
	if err != nil || len(manifest.Manifests) != 1 {
		t.Fatalf("index.json: %v, want one entry: %+v", err, manifest)
	}
	desc := manifest.Manifests[0]
	if a := desc.Annotations; a["io.containerd.image.name"] != ref || a["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Errorf("index.json annotations %v, want io.containerd.image.name=%s and org.opencontainers.image.ref.name=1.2.3", a, ref)
	}
	if desc.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json names a %s, want an OCI image index", desc.MediaType)
	}
	idx, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx, validate.Fast); err != nil {
		t.Fatalf("index %s: %v", desc.Digest, err)
	}
	platforms, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range platforms.Manifests {
		if m.Platform == nil || m.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("index entry %+v, want an OCI manifest with its platform", m)
		}
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil || cfg.OS != m.Platform.OS || cfg.Architecture != m.Platform.Architecture {
			t.Errorf("manifest for %s: config %v (%v), want the same platform", got[len(got)-1], cfg, err)
		}
		_, contents := imageFiles(t, img, "usr/local/bin/ssdcache-node")
		if want := "binary for " + m.Platform.Architecture; contents["usr/local/bin/ssdcache-node"] != want {
			t.Errorf("%s's /usr/local/bin/ssdcache-node holds %q, want %q", got[len(got)-1], contents["usr/local/bin/ssdcache-node"], want)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !reflect.DeepEqual(got, want) {
		t.Errorf("index lists %q, want %q", got, want)
	}
}

// TestArchesAreChecked: an architecture the image cannot be built for, or
// one given twice, is refused before anything is built.
func TestArchesAreChecked(t *testing.T) {
	for _, arches := range [][]string{{"x86_64"}, {"arm64", "arm64"}, {"amd64", ""}} {
		_, err := Build(context.Background(), Options{OutDir: t.TempDir(), Arches: arches, ProjectRef: "docker.io/ssdcache/ssdcache:e2e"})
		if err == nil || !strings.Contains(err.Error(), "want amd64 and/or arm64, each at most once") {
			t.Errorf("Arches %q: error %v, want a refusal", arches, err)
		}
	}
}
