package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssdcache/ssdcache/test/docs"
	"github.com/ssdcache/ssdcache/test/vm"
)

// docsBlock is the code block of file (in the repository) marked
// <!-- docs-test: name -->, as this cluster runs it: each replacement's
// placeholder replaced by this cluster's node, image, disks or volumes.
// Every placeholder must be found, so docs that change fail here rather than
// being skipped.
func (s *suite) docsBlock(t *testing.T, file, name string, replacements [][2]string) string {
	t.Helper()
	b, err := docs.Marked(s.repo, file, name)
	if err != nil {
		t.Fatal(err)
	}
	block := b.Text
	for _, r := range replacements {
		if !strings.Contains(block, r[0]) {
			t.Fatalf("%s's %s block no longer has %q, which the e2e replaces with %q:\n%s", file, name, r[0], r[1], block)
		}
		block = strings.ReplaceAll(block, r[0], r[1])
	}
	return block
}

// runDocs runs a docs block in the work directory.
func (s *suite) runDocs(ctx context.Context, t *testing.T, file, name string, replacements [][2]string) {
	t.Helper()
	script := s.docsBlock(t, file, name, replacements)
	out, err := s.c.Shell(ctx, s.workDir, script)
	if err != nil {
		t.Fatalf("%s's %s block:\n%s\n%v\n%s", file, name, script, err, s.explain(ctx, object{ns: namespace}))
	}
	t.Logf("%s's %s block, as run here:\n%s%s", file, name, script, out)
}

// helmInstall runs the README's install against the Helm repository
// hack/release.sh wrote: `helm repo add` of its URL, then `helm install` of
// the chart fetched from it. The e2e's own settings (images built here and
// pulled from nowhere, their tag rather than the release's appVersion,
// faster sampling) go in one values file at the end of the helm command; the
// disks come from the README's selectors.
func (s *suite) helmInstall(ctx context.Context, t *testing.T) {
	values := filepath.Join(s.workDir, "values.yaml")
	writeYAML(t, values, s.chartValues())
	repository := s.serveRelease(ctx, t)
	repo, _, _ := strings.Cut(s.images.project, ":")
	s.runDocs(ctx, t, "README.md", "install", [][2]string{
		{docs.ChartRepoURL, repository.URL},
		{"storage-1 storage-2", "e2e-node"},
		{"registry.example.com/ssdcache", repo},
		{"/dev/disk/by-id/ata-ST4000NM*", strings.TrimSuffix(vm.HDDByID, "-0") + "*"},
		{"/dev/disk/by-id/nvme-Samsung_SSD_980*", strings.TrimSuffix(vm.SSDByID, "-0") + "*"},
		{"--set storageClass.create=true\n", "--set storageClass.create=true \\\n  --values " + values + "\n"},
	})
	// The chart came from the release's repository, as a user's does.
	for _, path := range []string{"/index.yaml", "/ssdcache-" + releaseVersion + ".tgz"} {
		if !repository.Served(path) {
			t.Fatalf("the README's install did not fetch %s from the release's repository %s (served: %q)", path, repository.URL, repository.Paths())
		}
	}
	s.pluginInstalled = true
	s.waitInstalled(ctx, t)
}
