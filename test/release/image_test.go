package release

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ociDescriptor, ociManifest and ociConfig are the parts of the OCI image
// layout the check reads.
type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
	Annotations map[string]string `json:"annotations"`
}

type ociManifest struct {
	Manifests []ociDescriptor `json:"manifests"` // index
	Config    ociDescriptor   `json:"config"`    // image manifest
	Layers    []ociDescriptor `json:"layers"`    // image manifest
}

type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

const ociIndexType = "application/vnd.oci.image.index.v1+json"

// elfMachine is the ELF machine of a released architecture.
func elfMachine(arch string) elf.Machine {
	return map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
}

// lvmPath is where Debian's lvm2 puts lvm in the image's Debian layer
// (/sbin is a link to usr/sbin).
const lvmPath = "usr/sbin/lvm"

// checkImage reads the OCI archive: index.json names
// docker.io/<imageRepo>:<version> (ref name <version>) and points at an
// image index listing linux/amd64 and linux/arm64, whose manifests' configs
// say their architecture; each platform's Debian layer holds an lvm of that
// architecture and its last layer the released binaries of that
// architecture, byte for byte. The arm64 platform's file system is unpacked
// and its lvm and ssdcache-node run under qemu-user. Returns the digest the
// archive names, the index's.
func checkImage(t *testing.T, path, version, dir string, a artifacts) (digest string) {
	t.Helper()
	small := smallEntries(t, path)
	var index ociManifest
	if err := json.Unmarshal(small["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want 1, the image index", len(index.Manifests))
	}
	d := index.Manifests[0]
	ref := "docker.io/" + imageRepo + ":" + version
	if d.Annotations["org.opencontainers.image.ref.name"] != version || d.Annotations["io.containerd.image.name"] != ref {
		t.Errorf("index.json annotations %v, want org.opencontainers.image.ref.name=%s and io.containerd.image.name=%s", d.Annotations, version, ref)
	}
	if d.MediaType != ociIndexType {
		t.Fatalf("index.json names a %s, want an image index (%s) listing linux/%s", d.MediaType, ociIndexType, strings.Join(arches, " and linux/"))
	}
	var platforms ociManifest
	blobJSON(t, small, d.Digest, &platforms)

	root := t.TempDir() // the arm64 platform's file system
	layers := map[string][]func(io.Reader){}
	var listed []string
	for _, m := range platforms.Manifests {
		if m.Platform == nil {
			t.Fatalf("image index entry %s has no platform", m.Digest)
		}
		arch := m.Platform.Architecture
		listed = append(listed, m.Platform.OS+"/"+arch)
		var manifest ociManifest
		blobJSON(t, small, m.Digest, &manifest)
		var config ociConfig
		blobJSON(t, small, manifest.Config.Digest, &config)
		if config.OS != m.Platform.OS || config.Architecture != arch {
			t.Errorf("linux/%s's config says %s/%s", arch, config.OS, config.Architecture)
		}
		if len(manifest.Layers) < 2 {
			t.Fatalf("linux/%s has %d layers, want Debian's and the binaries'", arch, len(manifest.Layers))
		}
		// test/e2e/images: Debian, then the binaries.
		debian, bins := blobName(manifest.Layers[0].Digest), blobName(manifest.Layers[len(manifest.Layers)-1].Digest)
		layers[debian] = append(layers[debian], func(r io.Reader) {
			files := filesInLayer(t, r, func(name string) bool { return name == lvmPath })
			checkELF(t, fmt.Sprintf("linux/%s's /%s", arch, lvmPath), files[lvmPath], arch)
		})
		layers[bins] = append(layers[bins], func(r io.Reader) {
			files := filesInLayer(t, r, func(name string) bool { return strings.HasPrefix(name, "usr/local/bin/") })
			for _, b := range binaries {
				data, name := files["usr/local/bin/"+b], fmt.Sprintf("linux/%s's /usr/local/bin/%s", arch, b)
				want := fileSHA256(t, filepath.Join(dir, a.binaries[b+"/"+arch]))
				if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != want {
					t.Errorf("%s (%d bytes) is not the released %s (sha256 %s)", name, len(data), a.binaries[b+"/"+arch], want)
				}
				checkELF(t, name, data, arch)
			}
		})
		if arch == "arm64" {
			for _, l := range []string{debian, bins} {
				layers[l] = append(layers[l], func(r io.Reader) { unpackLayer(t, r, root) })
			}
		}
	}
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(listed, want) {
		t.Fatalf("the image index lists %q, want %q", listed, want)
	}
	readLayers(t, path, layers)
	runUnderEmulation(t, root, version)
	return d.Digest
}

// blobJSON decodes the archive's blob digest, checked against its digest.
func blobJSON(t *testing.T, small map[string][]byte, digest string, v any) {
	t.Helper()
	data, ok := small[blobName(digest)]
	if sum := sha256.Sum256(data); !ok || "sha256:"+hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("blob %s missing or not matching its digest", digest)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("blob %s: %v", digest, err)
	}
}

func blobName(digest string) string {
	return "blobs/" + strings.Replace(digest, ":", "/", 1)
}

// smallEntries reads the archive's files under 1 MiB (index.json, the
// manifests, the configs); the layers are streamed, not held.
func smallEntries(t *testing.T, path string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	eachEntry(t, path, func(h *tar.Header, r io.Reader) {
		if h.Size >= 1<<20 {
			return
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	})
	return out
}

// readLayers streams each blob of the archive named in layers to its
// readers, in one pass over the archive, each reader getting the whole
// (uncompressed) layer in turn.
func readLayers(t *testing.T, path string, layers map[string][]func(io.Reader)) {
	t.Helper()
	seen := map[string]bool{}
	eachEntry(t, path, func(h *tar.Header, r io.Reader) {
		readers := layers[h.Name]
		if len(readers) == 0 {
			return
		}
		seen[h.Name] = true
		if len(readers) == 1 {
			readers[0](r)
			return
		}
		// Held once for several readers (Debian's layer is ~200 MB).
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, read := range readers {
			read(bytes.NewReader(data))
		}
	})
	for name := range layers {
		if !seen[name] {
			t.Errorf("%s: layer %s is missing", path, name)
		}
	}
}

func eachEntry(t *testing.T, path string, fn func(*tar.Header, io.Reader)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		fn(h, tr)
	}
}

// filesInLayer returns the content of the layer's regular files whose names
// (without a leading "./" or "/") want accepts.
func filesInLayer(t *testing.T, r io.Reader, want func(string) bool) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	layer := tar.NewReader(r)
	for {
		h, err := layer.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("layer: %v (want an uncompressed tar)", err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		if h.Typeflag != tar.TypeReg || !want(name) {
			continue
		}
		data, err := io.ReadAll(layer)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
}

// checkELF wants data to be an ELF executable for arch.
func checkELF(t *testing.T, name string, data []byte, arch string) *elf.File {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s (%d bytes): %v, want an ELF executable for %s", name, len(data), err, arch)
		return nil
	}
	if want := elfMachine(arch); f.Machine != want {
		t.Errorf("%s is for %s, want %s (%s)", name, f.Machine, want, arch)
	}
	return f
}

// unpackLayer extracts the layer into root with GNU tar (numeric owners,
// links, modes as in the image).
func unpackLayer(t *testing.T, r io.Reader, root string) {
	t.Helper()
	cmd := exec.Command("tar", "-x", "--numeric-owner", "-C", root)
	cmd.Stdin = r
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unpacking a layer into %s: %v\n%s", root, err, out)
	}
}

// runUnderEmulation runs lvm and ssdcache-node from the arm64 file system
// at root in a chroot, which the kernel hands to qemu-aarch64 through
// binfmt_misc (hack/image/emulate.sh registers it, as the build of the arm64
// layer did): the layer's dynamic lvm finds its libraries and lvm.conf, and
// the static binary runs.
func runUnderEmulation(t *testing.T, root, version string) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "image", "emulate.sh"), "arm64").CombinedOutput(); err != nil {
		t.Fatalf("hack/image/emulate.sh arm64: %v\n%s", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"/" + lvmPath, "version"}, "LVM version:"},
		{[]string{"/usr/local/bin/ssdcache-node", "--version"}, "ssdcache-node " + version},
	} {
		out, err := exec.Command("chroot", append([]string{root}, c.args...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("chroot <arm64 image> %s: %v, output %q; want %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}
