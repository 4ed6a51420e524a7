package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/ssdcache/ssdcache/test/vm"
)

// buildPause builds the pause program once per test into a temp dir.
func buildPause(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pause")
	if err := (vm.GoBuild{Packages: []string{"./test/e2e/images/pause"}, Out: out, Dir: repoRoot, LDFlags: "-s -w"}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBuildBinaryImageWritesANamedOCILayout(t *testing.T) {
	pause := buildPause(t)
	outDir := t.TempDir()
	const ref = "localhost/ssdcache/pause:e2e"
	o := Options{OutDir: outDir, Logger: ktesting.NewLogger(t, ktesting.DefaultConfig),
		Binaries: []BinaryImage{{Ref: ref, Binary: pause, Entrypoint: []string{"/pause"}}}}
	archives, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != 1 || archives[0].Ref != ref || filepath.Dir(archives[0].Path) != outDir {
		t.Fatalf("archives %+v, want one for %s in %s", archives, ref, outDir)
	}
	desc, img := readArchive(t, archives[0].Path)
	if got := desc.Annotations[annotationContainerdName]; got != ref {
		t.Errorf("index annotation %s = %q, want %q (ctr names the imported image by it)", annotationContainerdName, got, ref)
	}
	if desc.MediaType != types.OCIManifestSchema1 || desc.Platform == nil || desc.Platform.Architecture != "amd64" {
		t.Errorf("index entry %+v, want an OCI manifest for linux/amd64", desc)
	}
	checkConfig(t, img, "", nil, []string{"/pause"})
	files := imageFiles(t, img)
	if h := files["pause"]; h == nil || h.Mode != 0o755 || h.Size == 0 {
		t.Errorf("/pause entry %+v, want a 0755 regular file", h)
	}
	if h := files["tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("/tmp entry %+v, want a 01777 directory", h)
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	pause := buildPause(t)
	digests := make([]v1.Hash, 2)
	for i := range digests {
		o := Options{OutDir: t.TempDir(), Binaries: []BinaryImage{{Ref: "localhost/p:1", Binary: pause, Entrypoint: []string{"/bin/p", "-v"}}}}
		archives, err := Build(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		desc, _ := readArchive(t, archives[0].Path)
		digests[i] = desc.Digest
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
	good := BinaryImage{Ref: "localhost/p:1", Binary: bin, Entrypoint: []string{"/p"}}
	cases := map[string]struct {
		o       Options
		wantErr string
	}{
		"no out dir":     {Options{Binaries: []BinaryImage{good}}, "Options.OutDir"},
		"nothing":        {Options{OutDir: "/x"}, "nothing to build"},
		"short ref":      {Options{OutDir: "/x", Binaries: []BinaryImage{{Ref: "pause:1", Binary: bin, Entrypoint: []string{"/p"}}}}, `Options.Binaries[0].Ref "pause:1": want a fully qualified name`},
		"no tag":         {Options{OutDir: "/x", Binaries: []BinaryImage{{Ref: "localhost:5000/p", Binary: bin, Entrypoint: []string{"/p"}}}}, "want a tag"},
		"relative entry": {Options{OutDir: "/x", Binaries: []BinaryImage{{Ref: "localhost/p:1", Binary: bin, Entrypoint: []string{"p"}}}}, "Options.Binaries[0].Entrypoint"},
		"missing binary": {Options{OutDir: "/x", Binaries: []BinaryImage{{Ref: "localhost/p:1", Binary: bin + "x", Entrypoint: []string{"/p"}}}}, "Options.Binaries[0].Binary"},
		"duplicate ref":  {Options{OutDir: "/x", Binaries: []BinaryImage{good, good}}, "Options.Binaries[1].Ref"},
		"project alone":  {Options{OutDir: "/x", ProjectRef: "docker.io/a/b:c"}, "Options.RepoRoot"},
		"spaced version": {Options{OutDir: "/x", ProjectRef: "docker.io/a/b:c", RepoRoot: "/r", CacheDir: "/c", Version: "1.0 -X x"}, `Options.Version "1.0 -X x": want no spaces`},
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

// readArchive unpacks an archive and reads it back with go-containerregistry's
// OCI layout reader: the index entry of its only image, and the image.
func readArchive(t *testing.T, archive string) (v1.Descriptor, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	untar(t, archive, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(manifest.Manifests))
	}
	img, err := idx.Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return manifest.Manifests[0], img
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
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
		raw, _ := json.Marshal(c)
		t.Errorf("config %s, want user %q, entrypoint %q, WorkingDir / and Env %q", raw, user, entrypoint, wantEnv)
	}
}

// imageFiles lists the image's file system (later layers win), keyed by
// path without the leading slash.
func imageFiles(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimSuffix(path.Clean(hdr.Name), "/")] = hdr
		}
		rc.Close()
	}
	return files
}
