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

// runDocs runs a docs block in the work directory, where the release's
// chart package is (_output/release, as `make release` leaves it).
func (s *suite) runDocs(ctx context.Context, t *testing.T, file, name string, replacements [][2]string) {
	t.Helper()
	script := s.docsBlock(t, file, name, replacements)
	out, err := s.c.Shell(ctx, s.workDir, script)
	if err != nil {
		t.Fatalf("%s's %s block:\n%s\n%v\n%s", file, name, script, err, s.explain(ctx, object{ns: namespace}))
	}
	t.Logf("%s's %s block, as run here:\n%s%s", file, name, script, out)
}

// helmInstall runs the README's install on the chart packaged as `make
// release` packages it. The e2e's own settings (images built here and pulled
// from nowhere, faster sampling) go in one values file at the end of the
// helm command; the disks come from the README's selectors.
func (s *suite) helmInstall(ctx context.Context, t *testing.T) {
	values := filepath.Join(s.workDir, "values.yaml")
	writeYAML(t, values, s.chartValues())
	_, tag, _ := strings.Cut(s.images.project, ":")
	if _, err := s.c.Helm(ctx, "package", filepath.Join(s.repo, "charts", "ssdcache"), "--version", "0.1.0", "--app-version", tag,
		"-d", filepath.Join(s.workDir, "_output", "release")); err != nil {
		t.Fatal(err)
	}
	repo, _, _ := strings.Cut(s.images.project, ":")
	s.runDocs(ctx, t, "README.md", "install", [][2]string{
		{"storage-1 storage-2", "e2e-node"},
		{"registry.example.com/ssdcache", repo},
		{"/dev/disk/by-id/ata-ST4000NM*", strings.TrimSuffix(vm.HDDByID, "-0") + "*"},
		{"/dev/disk/by-id/nvme-Samsung_SSD_980*", strings.TrimSuffix(vm.SSDByID, "-0") + "*"},
		{"--set storageClass.create=true\n", "--set storageClass.create=true \\\n  --values " + values + "\n"},
	})
	s.pluginInstalled = true
	s.waitInstalled(ctx, t)
}
