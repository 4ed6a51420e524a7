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

	"github.com/ssdcache/ssdcache/test/vm"
)

// buildPause builds the pause program into a temp dir.
func buildPause(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pause")
	if err := (vm.GoBuild{Packages: []string{"./test/e2e/images/pause"}, Out: out, Dir: repoRoot, LDFlags: "-s -w"}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBinaryImage builds a single-binary image twice: a named OCI layout
// with the binary at the entrypoint and /tmp, and the same digest each time.
func TestBinaryImage(t *testing.T) {
	pause := buildPause(t)
	const ref = "localhost/ssdcache/pause:e2e"
	var digests []v1.Hash
	for range 2 {
		outDir := t.TempDir()
		archives, err := Build(context.Background(), Options{OutDir: outDir, Logger: ktesting.NewLogger(t, ktesting.DefaultConfig),
			Binaries: []BinaryImage{{Ref: ref, Binary: pause, Entrypoint: []string{"/pause"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(archives) != 1 || archives[0].Ref != ref || filepath.Dir(archives[0].Path) != outDir {
			t.Fatalf("archives %+v, want one for %s in %s", archives, ref, outDir)
		}
		desc, img := readArchive(t, archives[0].Path, ref)
		digests = append(digests, desc.Digest)
		checkConfig(t, img, "", nil, []string{"/pause"})
		files, _ := imageFiles(t, img)
		if h := files["pause"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Size == 0 {
			t.Errorf("/pause entry %+v, want a root-owned 0755 regular file", h)
		}
		if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
			t.Errorf("/tmp entry %+v, want a 01777 directory", h)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same binary gave manifests %s and %s", digests[0], digests[1])
	}
}

func TestOptionsValidation(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	image := func(ref, binary, entry string) []BinaryImage {
		return []BinaryImage{{Ref: ref, Binary: binary, Entrypoint: []string{entry}}}
	}
	good := image("localhost/p:1", bin, "/p")[0]
	cases := map[string]struct {
		o       Options
		wantErr string
	}{
		"no out dir":     {Options{Binaries: []BinaryImage{good}}, "Options.OutDir"},
		"nothing":        {Options{OutDir: "/x"}, "nothing to build"},
		"short ref":      {Options{OutDir: "/x", Binaries: image("pause:1", bin, "/p")}, `Options.Binaries[0].Ref "pause:1"`},
		"no tag":         {Options{OutDir: "/x", Binaries: image("localhost:5000/p", bin, "/p")}, `Options.Binaries[0].Ref "localhost:5000/p"`},
		"relative entry": {Options{OutDir: "/x", Binaries: image("localhost/p:1", bin, "p")}, "Options.Binaries[0].Entrypoint"},
		"missing binary": {Options{OutDir: "/x", Binaries: image("localhost/p:1", bin+"x", "/p")}, "Options.Binaries[0].Binary"},
		"duplicate ref":  {Options{OutDir: "/x", Binaries: []BinaryImage{good, good}}, "Options.Binaries[1].Ref"},
		"project alone":  {Options{OutDir: "/x", ProjectRef: "docker.io/a/b:c"}, "Options.RepoRoot"},
		"spaced version": {Options{OutDir: "/x", ProjectRef: "docker.io/a/b:c", RepoRoot: "/r", CacheDir: "/c", Version: "1.0 -X x"}, `Options.Version "1.0 -X x"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// readArchive unpacks an archive as ctr would read it, an OCI layout with
// one linux/amd64 image named ref, and returns its index entry and the
// image, whose blobs are checked against their digests.
func readArchive(t *testing.T, archive, ref string) (v1.Descriptor, v1.Image) {
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
	if err := validate.Image(img, validate.Fast); err != nil { // manifest and config
		t.Fatalf("image %s: %v", desc.Digest, err)
	}
	checkLayerBlobs(t, img)
	return desc, img
}

// checkLayerBlobs hashes each layer's blob: uncompressed, so its digest is
// also its diff ID in the config, which containerd checks on unpacking.
func checkLayerBlobs(t *testing.T, img v1.Image) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := v1.SHA256(rc)
		rc.Close()
		if want, _ := l.Digest(); err != nil || got != want || cfg.RootFS.DiffIDs[i] != want {
			t.Errorf("layer %d: blob sha256 %v (%v), want its digest %v, also the config's diff ID %v", i, got, err, want, cfg.RootFS.DiffIDs[i])
		}
	}
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
