// Package release checks what `make release` ships: it runs hack/release.sh
// into a temporary directory and reads every artifact back, so a release
// whose binaries, image, chart and checksums disagree on the version fails
// here rather than at a user's `helm install`.
//
// The full run builds the binaries and the image (about a minute with the
// image's Debian layer cached by test/e2e/images; minutes and root the first
// time) and runs only with SSDCACHE_RELEASE=1 (`make test-release`, part of
// `make test`). The refusals of bad input run always: they stop before
// building anything.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

const repoRoot = "../.."

// binaries are the three commands, released as <name>-<version>-linux-amd64.
var binaries = []string{"ssdcache-node", "ssdcache-controller", "ssdcache-bench"}

// imageRepo is the chart's default image.repository; the image archive is
// named for it so that `ctr images import` gives the name the chart pulls.
const imageRepo = "ssdcache/ssdcache"

// releaseScript runs hack/release.sh with args and returns its stderr.
func releaseScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return releaseScriptIn(t, "", args...)
}

// releaseScriptIn runs hack/release.sh from the directory dir ("": this one).
func releaseScriptIn(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(repoRoot, "hack", "release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	err = cmd.Run()
	return stderr.String(), err
}

func TestReleaseRefusesBadVersions(t *testing.T) {
	for _, v := range []string{"", "1.2", "1.2.3.4", "01.2.3", "1.2.3+build.5", "1.2.3-", "1.2.3-rc..1", "1.2.3-01", "V1.2.3", "aef9708", "1.2.3 -X x"} {
		stderr, err := releaseScript(t, v, filepath.Join(t.TempDir(), "out"))
		if err == nil {
			t.Errorf("VERSION %q: hack/release.sh succeeded, want a refusal", v)
			continue
		}
		if want := fmt.Sprintf("VERSION %q is not allowed: want a semantic version", v); !strings.Contains(stderr, want) {
			t.Errorf("VERSION %q: stderr %q, want it to contain %q", v, stderr, want)
		}
	}
}

// A relative OUT_DIR is the caller's, not the repository's: the refusal
// names the directory the caller meant.
func TestReleaseKeepsADirectoryThatIsNoRelease(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "mine")
	keep := filepath.Join(out, "notes.txt")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, err := releaseScriptIn(t, parent, "1.2.3", "mine")
	if want := "OUT_DIR " + out + " holds files but no SHA256SUMS, so it is not a former release; refusing to replace it"; err == nil || !strings.Contains(stderr, want) {
		t.Fatalf("err %v, stderr %q; want %q", err, stderr, want)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("%s is gone: %v", keep, err)
	}
}

// TestReleaseArtifactsCarryOneVersion releases "v0.0.1-rc.1", which must
// come out as 0.0.1-rc.1 everywhere (the leading v is dropped).
func TestReleaseArtifactsCarryOneVersion(t *testing.T) {
	if testing.Short() || os.Getenv("SSDCACHE_RELEASE") != "1" {
		t.Skip("builds the binaries and the image; set SSDCACHE_RELEASE=1 (make test-release)")
	}
	const version = "0.0.1-rc.1"
	out := filepath.Join(t.TempDir(), "release")
	if stderr, err := releaseScript(t, "v"+version, out); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, stderr)
	}
	a := artifactNames(version)
	checkFileSet(t, out, a)
	checkSums(t, out)
	for _, b := range binaries {
		checkBinary(t, filepath.Join(out, a.binaries[b]), b, version)
	}
	ch := checkChart(t, filepath.Join(out, a.chart), version)
	checkCRDs(t, filepath.Join(out, a.crds), ch)
	checkImage(t, filepath.Join(out, a.image), version, out, a)
}

type artifacts struct {
	binaries                map[string]string // command -> file name
	image, chart, crds, sum string
}

// artifactNames are the file names the README installs from.
func artifactNames(v string) artifacts {
	a := artifacts{binaries: map[string]string{}, image: "ssdcache-image-" + v + ".oci.tar",
		chart: "ssdcache-" + v + ".tgz", crds: "ssdcache-crds-" + v + ".yaml", sum: "SHA256SUMS"}
	for _, b := range binaries {
		a.binaries[b] = b + "-" + v + "-linux-amd64"
	}
	return a
}

func checkFileSet(t *testing.T, dir string, a artifacts) {
	t.Helper()
	want := []string{a.image, a.chart, a.crds, a.sum}
	for _, f := range a.binaries {
		want = append(want, f)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("release holds %q, want exactly %q", got, want)
	}
}

// checkSums wants SHA256SUMS in sha256sum's format to list every other file
// once, with its digest.
func checkSums(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 || listed[name] {
			t.Errorf("SHA256SUMS line %q: want one \"<sha256>  <file>\" per file", sc.Text())
			continue
		}
		listed[name] = true
		if got := fileSHA256(t, filepath.Join(dir, name)); got != sum {
			t.Errorf("SHA256SUMS: %s is %s, listed as %s", name, got, sum)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" && !listed[e.Name()] {
			t.Errorf("SHA256SUMS does not list %s", e.Name())
		}
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkBinary runs --version and checks the build: static (no ELF
// interpreter), -trimpath, cgo off.
func checkBinary(t *testing.T, path, name, version string) {
	t.Helper()
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Errorf("%s --version: %v", path, err)
		return
	}
	if f := strings.Fields(string(out)); len(f) < 2 || f[0] != name || f[1] != version {
		t.Errorf("%s --version printed %q, want %q first", path, out, name+" "+version)
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: it is dynamically linked, want static", path)
		}
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" || settings["GOARCH"] != "amd64" {
		t.Errorf("%s build settings %v, want -trimpath=true CGO_ENABLED=0 GOOS=linux GOARCH=amd64", path, settings)
	}
}

// checkChart wants the packaged chart's version and appVersion to be the
// release's, and its default render to run the release's image.
func checkChart(t *testing.T, path, version string) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("Chart.yaml version %q appVersion %q, want both %q", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	top, err := chartutil.ToRenderValues(ch, map[string]any{"bench": map[string]any{"enabled": true}, "storageClass": map[string]any{"create": true},
		// The chart refuses an install without origin disks; the README installs with this selector.
		"node": map[string]any{"originSelector": map[string]any{"rotational": true}}},
		chartutil.ReleaseOptions{Name: "ssd", Namespace: "ssdcache-system", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		t.Fatal(err)
	}
	images := regexp.MustCompile(`image: "?(\S*` + regexp.QuoteMeta(imageRepo) + `\S*?)"?\n`)
	var found []string
	for _, text := range files {
		for _, m := range images.FindAllStringSubmatch(text, -1) {
			found = append(found, m[1])
		}
	}
	// The node DaemonSet, the controller Deployment and the bench Job.
	if len(found) < 3 {
		t.Errorf("the default render runs %q, want the node, controller and bench images", found)
	}
	for _, img := range found {
		if img != imageRepo+":"+version {
			t.Errorf("the default render runs %s, want %s:%s", img, imageRepo, version)
		}
	}
	return ch
}

// checkCRDs wants the CRD file to be the chart's crds/, in order.
func checkCRDs(t *testing.T, path string, ch *chart.Chart) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for _, f := range ch.CRDObjects() {
		if !bytes.HasPrefix(f.File.Data, []byte("---\n")) {
			want.WriteString("---\n")
		}
		want.Write(f.File.Data)
	}
	if len(ch.CRDObjects()) == 0 || !bytes.Equal(data, want.Bytes()) {
		t.Errorf("%s (%d bytes) is not the chart's %d CRD files (%d bytes)", path, len(data), len(ch.CRDObjects()), want.Len())
	}
}

// ociDescriptor and ociManifest are the parts of the OCI image layout the
// check reads.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

type ociManifest struct {
	Manifests []ociDescriptor `json:"manifests"` // index
	Layers    []ociDescriptor `json:"layers"`    // image manifest
}

// checkImage reads the OCI archive: index.json names the image
// docker.io/<imageRepo>:<version> with ref name <version>, and the binaries
// inside are byte for byte the released ones.
func checkImage(t *testing.T, path, version, dir string, a artifacts) {
	t.Helper()
	small := smallEntries(t, path)
	var index ociManifest
	if err := json.Unmarshal(small["index.json"], &index); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d images, want 1", len(index.Manifests))
	}
	d := index.Manifests[0]
	ref := "docker.io/" + imageRepo + ":" + version
	if d.Annotations["org.opencontainers.image.ref.name"] != version || d.Annotations["io.containerd.image.name"] != ref {
		t.Errorf("index.json annotations %v, want org.opencontainers.image.ref.name=%s and io.containerd.image.name=%s", d.Annotations, version, ref)
	}
	manifestData := small[blobName(d.Digest)]
	if sum := sha256.Sum256(manifestData); "sha256:"+hex.EncodeToString(sum[:]) != d.Digest {
		t.Fatalf("manifest blob %s missing or not matching its digest", d.Digest)
	}
	var m ociManifest
	if err := json.Unmarshal(manifestData, &m); err != nil || len(m.Layers) == 0 {
		t.Fatalf("manifest %s: %v, %d layers", d.Digest, err, len(m.Layers))
	}
	// The last layer holds the binaries (test/e2e/images: Debian, then binaries).
	inImage := binariesInLayer(t, path, blobName(m.Layers[len(m.Layers)-1].Digest))
	for _, b := range binaries {
		want := fileSHA256(t, filepath.Join(dir, a.binaries[b]))
		if got, ok := inImage["usr/local/bin/"+b]; !ok || got != want {
			t.Errorf("image's /usr/local/bin/%s has sha256 %q, want the released binary's %s", b, got, want)
		}
	}
}

func blobName(digest string) string {
	return "blobs/" + strings.Replace(digest, ":", "/", 1)
}

// smallEntries reads the archive's files under 1 MiB (index.json, the
// manifest, the config); the layers are streamed, not held.
func smallEntries(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Size < 1<<20 {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = data
		}
	}
}

// binariesInLayer returns the sha256 of each file under usr/local/bin in the
// (uncompressed) layer blob of the archive at path.
func binariesInLayer(t *testing.T, path, blob string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: layer %s not found: %v", path, blob, err)
		}
		if h.Name != blob {
			continue
		}
		sums := map[string]string{}
		layer := tar.NewReader(tr)
		for {
			lh, err := layer.Next()
			if err == io.EOF {
				return sums
			}
			if err != nil {
				t.Fatalf("layer %s: %v (want an uncompressed tar)", blob, err)
			}
			name := strings.TrimPrefix(lh.Name, "./")
			name = strings.TrimPrefix(name, "/")
			if !strings.HasPrefix(name, "usr/local/bin/") || lh.Typeflag != tar.TypeReg {
				continue
			}
			h := sha256.New()
			if _, err := io.Copy(h, layer); err != nil {
				t.Fatal(err)
			}
			sums[name] = hex.EncodeToString(h.Sum(nil))
		}
	}
}
