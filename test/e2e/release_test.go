package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/test/docs"
)

// releaseVersion is the version the e2e releases and the README installs.
const releaseVersion = "0.1.0"

// serveRelease writes a release with hack/release.sh, as `make release`
// does, and serves its directory as the Helm repository the README's install
// adds, on the loopback of the cluster's network namespace, where helm runs.
// The index names the chart by that URL (HELM_REPO_URL), as a published one
// does. The server runs until the test's end (TestEndToEnd closes it).
func (s *suite) serveRelease(ctx context.Context, t *testing.T) *docs.Repository {
	t.Helper()
	l, err := s.c.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatalf("the release's Helm repository: %v", err)
	}
	url := "http://" + l.Addr().String()
	dir := filepath.Join(s.workDir, "release")
	script := filepath.Join(s.repo, "hack", "release.sh")
	cmd := exec.CommandContext(ctx, script, releaseVersion, dir)
	cmd.Dir, cmd.Env = s.repo, releaseEnv(os.Environ(), url)
	cmd.WaitDelay = 10 * time.Second // go build's children keep its output open
	began := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.Close()
		t.Fatalf("hack/release.sh %s %s (HELM_REPO_URL=%s), which writes the Helm repository the README installs from, failed after %s: %v\n%s",
			releaseVersion, dir, url, time.Since(began).Round(time.Second), err, out)
	}
	t.Logf("hack/release.sh %s %s took %s:\n%s", releaseVersion, dir, time.Since(began).Round(time.Second), out)
	s.chartRepository = docs.ServeRepository(l, dir)
	return s.chartRepository
}

// releaseEnv is the caller's environment for hack/release.sh with the
// repository's URL, and without what would push the release somewhere
// (OCI_REGISTRY) or merge another index into it (HELM_REPO_INDEX).
func releaseEnv(environ []string, repoURL string) []string {
	var env []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "OCI_REGISTRY" || name == "HELM_REPO_INDEX" || name == "HELM_REPO_URL" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HELM_REPO_URL="+repoURL)
}

func TestReleaseEnvPushesNothingAndNamesTheServedURL(t *testing.T) {
	got := releaseEnv([]string{"PATH=/bin", "OCI_REGISTRY=ghcr.io/me", "HELM_REPO_INDEX=old/index.yaml", "HELM_REPO_URL=https://elsewhere", "CACHE_DIR=/c"}, "http://127.0.0.1:8080")
	want := []string{"PATH=/bin", "CACHE_DIR=/c", "HELM_REPO_URL=http://127.0.0.1:8080"}
	if !slices.Equal(got, want) {
		t.Errorf("releaseEnv = %q, want %q", got, want)
	}
}
