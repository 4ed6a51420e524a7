package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// versionScript runs hack/version.sh with args.
func versionScript(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "hack", "version.sh"), args...).Output()
	return strings.TrimSpace(string(out)), err
}

// TestVersionOfEveryDescription: hack/version.sh turns every git describe
// into a version hack/release.sh accepts (so the chart's version and
// appVersion and the image tag are it), and refuses what is neither a
// v-tag's description nor a hash.
func TestVersionOfEveryDescription(t *testing.T) {
	for describe, want := range map[string]string{
		"v0.2.0":                  "0.2.0",
		"0.2.0":                   "0.2.0",
		"v0.2.0-rc.1":             "0.2.0-rc.1",
		"v0.2.0-3-gabc1234-dirty": "0.2.0-3-gabc1234-dirty",
		"abc1234":                 "0.0.0-gabc1234",
		"0123456-dirty":           "0.0.0-g0123456-dirty",
	} {
		got, err := versionScript(t, describe)
		if err != nil || got != want {
			t.Errorf("hack/version.sh %s = %q (%v), want %q", describe, got, err, want)
			continue
		}
		// A directory that is no former release stops hack/release.sh right
		// after it accepted the version, before it builds anything.
		out := filepath.Join(t.TempDir(), "out")
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "mine"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		stderr, _ := releaseScript(t, got, out)
		if !strings.Contains(stderr, "is not a former release") {
			t.Errorf("hack/release.sh %s (from %s) did not accept the version: %s", got, describe, stderr)
		}
	}
	if got, err := versionScript(t, "release-2026"); err == nil {
		t.Errorf("hack/version.sh release-2026 = %q, want it refused", got)
	}
}

// TestImageAndReleaseTakeOneVersion: `make image` tags the image with the
// version `make release` gives the chart (version, appVersion: the chart's
// default image tag) and the image, hack/version.sh's of this checkout.
func TestImageAndReleaseTakeOneVersion(t *testing.T) {
	version, err := versionScript(t)
	if err != nil || version == "" {
		t.Fatalf("hack/version.sh: %q, %v", version, err)
	}
	makeDry := func(target string) string {
		cmd := exec.Command("make", "-s", "-n", target)
		cmd.Dir = repoRoot
		for _, kv := range os.Environ() { // the Makefile's VERSION, not the caller's
			if !strings.HasPrefix(kv, "VERSION=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		return string(out)
	}
	image, release := makeDry("image"), makeDry("release")
	for _, want := range []string{"-t ssdcache/ssdcache:" + version + " ", "-project docker.io/ssdcache/ssdcache:" + version + " ", "-version " + version + " "} {
		if !strings.Contains(image, want) {
			t.Errorf("make image does not run %q:\n%s", want, image)
		}
	}
	if want := `hack/release.sh "` + version + `"`; !strings.Contains(release, want) {
		t.Errorf("make release does not run %s:\n%s", want, release)
	}
}
