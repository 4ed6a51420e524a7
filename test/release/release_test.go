// Package release checks what `make release` ships: it runs hack/release.sh
// into a temporary directory and reads every artifact back, so a release
// whose binaries, image, chart and checksums disagree on the version fails
// here rather than at a user's `helm install`.
//
// The full run builds the binaries and the image for amd64 and arm64, runs
// the arm64 image's lvm and ssdcache-node under qemu-user, and pushes to an
// in-process registry (minutes with the image's Debian layers cached by
// test/e2e/images; the first time, root, deb.debian.org and more minutes,
// arm64's layer being built under qemu-user). It runs only with
// SSDCACHE_RELEASE=1 (`make test-release`, part of `make test`). The
// refusals of bad input run always: they stop before building anything.
package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
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
	"sigs.k8s.io/yaml"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const repoRoot = "../.."

// binaries are the three commands, released as <name>-<version>-linux-<arch>.
var binaries = []string{"ssdcache-node", "ssdcache-controller", "ssdcache-bench"}

// arches are the architectures the binaries and the image are released for.
var arches = []string{"amd64", "arm64"}

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

// TestReleaseNeedsItsChangelog: a release (not a prerelease) without its
// section in CHANGELOG.md is refused before anything is built; the
// changelog's own versions are accepted.
func TestReleaseNeedsItsChangelog(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	stderr, err := releaseScript(t, "9.9.9", out)
	if want := `CHANGELOG.md has no section "## [9.9.9]"`; err == nil || !strings.Contains(stderr, want) {
		t.Errorf("hack/release.sh 9.9.9: err %v, stderr %q; want %q", err, stderr, want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s was created (%v) before the refusal", out, err)
	}
	changelog, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## [0.1.0]\n") {
		t.Errorf("CHANGELOG.md has no section for 0.1.0, the chart's version, which the README releases")
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
// come out as 0.0.1-rc.1 everywhere (the leading v is dropped), into a Helm
// repository merged with a former release's index, and pushes chart and
// image to a registry (go-containerregistry's, in process).
func TestReleaseArtifactsCarryOneVersion(t *testing.T) {
	if testing.Short() || os.Getenv("SSDCACHE_RELEASE") != "1" {
		t.Skip("builds the binaries and the image; set SSDCACHE_RELEASE=1 (make test-release)")
	}
	const version = "0.0.1-rc.1"
	out := filepath.Join(t.TempDir(), "release")
	former := filepath.Join(t.TempDir(), "index.yaml")
	if err := os.WriteFile(former, []byte(formerIndex), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ociRegistry := strings.TrimPrefix(reg.URL, "http://") + "/ssdcache"
	t.Setenv("HELM_REPO_URL", repoURL)
	t.Setenv("HELM_REPO_INDEX", former)
	t.Setenv("OCI_REGISTRY", ociRegistry)
	t.Setenv("OCI_PLAIN_HTTP", "1")
	if stderr, err := releaseScript(t, "v"+version, out); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, stderr)
	}
	a := artifactNames(version)
	checkFileSet(t, out, a)
	checkSums(t, out)
	for _, b := range binaries {
		for _, arch := range arches {
			checkBinary(t, filepath.Join(out, a.binaries[b+"/"+arch]), b, arch, version)
		}
	}
	ch := checkChart(t, filepath.Join(out, a.chart), version)
	checkIndex(t, filepath.Join(out, a.index), filepath.Join(out, a.chart), version)
	checkCRDs(t, filepath.Join(out, a.crds), ch)
	digest := checkImage(t, filepath.Join(out, a.image), version, out, a)
	checkPushed(t, ociRegistry, version, digest, fileSHA256(t, filepath.Join(out, a.chart)))
}

// repoURL is where the test's Helm repository says it is served.
const repoURL = "https://charts.example.com/ssdcache"

// formerIndex is the repository's index before the release: one former
// version, which the release keeps.
const formerIndex = `apiVersion: v1
entries:
  ssdcache:
  - apiVersion: v2
    appVersion: 0.0.0-old
    created: "2026-01-01T00:00:00Z"
    digest: 0000000000000000000000000000000000000000000000000000000000000000
    name: ssdcache
    urls:
    - https://charts.example.com/ssdcache/ssdcache-0.0.0-old.tgz
    version: 0.0.0-old
generated: "2026-01-01T00:00:00Z"
`

// checkIndex wants index.yaml to be a Helm repository holding the released
// chart (its digest, the repository's URL) beside the former release.
func checkIndex(t *testing.T, path, chartPath, version string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The fields of Helm's repo.IndexFile that `helm repo add` and `helm
	// install` read.
	var index struct {
		APIVersion string `json:"apiVersion"`
		Entries    map[string][]struct {
			Name, Version, AppVersion, Digest string
			URLs                              []string `json:"urls"`
		} `json:"entries"`
	}
	if err := yaml.Unmarshal(data, &index); err != nil || index.APIVersion != "v1" {
		t.Fatalf("%s: %v, apiVersion %q; want a Helm repository index (v1)", path, err, index.APIVersion)
	}
	versions := map[string]bool{}
	wantURL := repoURL + "/ssdcache-" + version + ".tgz"
	found := false
	for _, cv := range index.Entries["ssdcache"] {
		versions[cv.Version] = true
		if cv.Version != version {
			continue
		}
		found = true
		if cv.Name != "ssdcache" || cv.AppVersion != version || len(cv.URLs) != 1 || cv.URLs[0] != wantURL || cv.Digest != fileSHA256(t, chartPath) {
			t.Errorf("index entry: name %s, appVersion %s, urls %q, digest %s; want ssdcache, %s, [%s], the chart's sha256", cv.Name, cv.AppVersion, cv.URLs, cv.Digest, version, wantURL)
		}
	}
	if !found || !versions["0.0.0-old"] || len(index.Entries) != 1 {
		t.Errorf("index entries %v: want ssdcache %s beside the former 0.0.0-old, nothing else", versions, version)
	}
}

// checkPushed wants the image index (by the archive's digest) with both
// platforms' manifests and the chart (its layer the released .tgz) in the
// registry.
func checkPushed(t *testing.T, ociRegistry, version, imageDigest, chartSHA256 string) {
	t.Helper()
	img, err := name.NewTag(ociRegistry+"/ssdcache:"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(img)
	if err != nil || desc.Digest.String() != imageDigest {
		t.Errorf("image %s in the registry: %v, digest %v; want the archive's %s", img, err, desc, imageDigest)
	}
	if idx, err := remote.Index(img); err != nil {
		t.Errorf("image index %s in the registry: %v", img, err)
	} else if m, err := idx.IndexManifest(); err != nil {
		t.Errorf("image index %s: %v", img, err)
	} else {
		var pushed []string
		for _, d := range m.Manifests {
			// Fetched by digest: the registry holds each manifest, not only the index.
			if _, err := remote.Get(img.Context().Digest(d.Digest.String())); err != nil || d.Platform == nil {
				t.Errorf("manifest %s of %s: %v, platform %v", d.Digest, img, err, d.Platform)
				continue
			}
			pushed = append(pushed, d.Platform.OS+"/"+d.Platform.Architecture)
		}
		if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(pushed, want) {
			t.Errorf("image index %s in the registry lists %q, want %q", img, pushed, want)
		}
	}
	chartRef, err := name.NewTag(ociRegistry+"/charts/ssdcache:"+version, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := remote.Image(chartRef)
	if err != nil {
		t.Fatalf("chart %s in the registry: %v", chartRef, err)
	}
	layers, err := pushed.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("chart %s: %d layers (%v), want the .tgz", chartRef, len(layers), err)
	}
	if d, err := layers[0].Digest(); err != nil || d.Hex != chartSHA256 {
		t.Errorf("chart %s holds %v, want the released .tgz (sha256:%s)", chartRef, d, chartSHA256)
	}
}

type artifacts struct {
	binaries                       map[string]string // command/arch -> file name
	image, chart, index, crds, sum string
}

// artifactNames are the file names the README installs from.
func artifactNames(v string) artifacts {
	a := artifacts{binaries: map[string]string{}, image: "ssdcache-image-" + v + ".oci.tar",
		chart: "ssdcache-" + v + ".tgz", index: "index.yaml", crds: "ssdcache-crds-" + v + ".yaml", sum: "SHA256SUMS"}
	for _, b := range binaries {
		for _, arch := range arches {
			a.binaries[b+"/"+arch] = b + "-" + v + "-linux-" + arch
		}
	}
	return a
}

func checkFileSet(t *testing.T, dir string, a artifacts) {
	t.Helper()
	want := []string{a.image, a.chart, a.index, a.crds, a.sum}
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

// checkBinary checks the build: static (no ELF interpreter), -trimpath, cgo
// off, for linux/arch, stamped with the version; an amd64 binary also prints
// it for --version.
func checkBinary(t *testing.T, path, name, arch, version string) {
	t.Helper()
	if arch == "amd64" {
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			t.Errorf("%s --version: %v", path, err)
			return
		}
		if f := strings.Fields(string(out)); len(f) < 2 || f[0] != name || f[1] != version {
			t.Errorf("%s --version printed %q, want %q first", path, out, name+" "+version)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef := checkELF(t, path, data, arch)
	if ef == nil {
		return
	}
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
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOOS"] != "linux" || settings["GOARCH"] != arch {
		t.Errorf("%s build settings %v, want -trimpath=true CGO_ENABLED=0 GOOS=linux GOARCH=%s", path, settings, arch)
	}
	// -trimpath leaves -ldflags out of the build info; a binary that cannot
	// run here (arm64) must at least hold the version it was stamped with.
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("%s does not hold the version %s", path, version)
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
