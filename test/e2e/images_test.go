package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ssdcache/ssdcache/test/e2e/images"
	"github.com/ssdcache/ssdcache/test/vm"
)

// imageRefs are the images the cluster runs, all imported from archives.
type imageRefs struct {
	archives     []string
	project      string // the repository's Dockerfile, assembled without an engine
	pause        string
	pauseArchive string
	// The sidecars, by chart value: repository and tag.
	registrar, provisioner imageName
}

type imageName struct{ Repository, Tag string }

func (n imageName) ref() string { return n.Repository + ":" + n.Tag }

// buildImages assembles the project image from the Dockerfile's recipe, the
// real csi-provisioner (built from its module by hack/e2e-assets.sh), the
// stand-in of node-driver-registrar (whose module the proxy does not serve;
// see test/e2e/sidecars) and a pause image.
func (s *suite) buildImages(ctx context.Context, t *testing.T) {
	// The sidecars' tags are the chart's, so that the e2e runs the versions
	// users get.
	raw, err := os.ReadFile(filepath.Join(s.repo, "charts", "ssdcache", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Sidecars struct {
			NodeDriverRegistrar, Provisioner struct{ Image imageName }
		}
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("charts/ssdcache/values.yaml: %v", err)
	}
	sc := values.Sidecars
	r := imageRefs{
		project:     "docker.io/ssdcache/ssdcache:e2e",
		pause:       "localhost/ssdcache-e2e/pause:1",
		registrar:   imageName{"localhost/ssdcache-e2e/csi-node-driver-registrar", sc.NodeDriverRegistrar.Image.Tag + "-standin"},
		provisioner: imageName{"registry.k8s.io/sig-storage/csi-provisioner", sc.Provisioner.Image.Tag},
	}
	binDir := filepath.Join(s.workDir, "bin")
	bins := []images.BinaryImage{
		{Ref: r.pause, Binary: filepath.Join(binDir, "pause"), Entrypoint: []string{"/pause"}},
		{Ref: r.registrar.ref(), Binary: filepath.Join(binDir, "csi-node-driver-registrar"), Entrypoint: []string{"/csi-node-driver-registrar"}},
		{Ref: r.provisioner.ref(), Binary: filepath.Join(requireEnv(t, binEnv), "csi-provisioner"), Entrypoint: []string{"/csi-provisioner"}},
	}
	for pkg, bin := range map[string]string{
		"./test/e2e/images/pause":                   bins[0].Binary,
		"./test/e2e/sidecars/node-driver-registrar": bins[1].Binary,
	} {
		if err := (vm.GoBuild{Packages: []string{pkg}, Out: bin, Dir: s.repo, LDFlags: "-s -w"}).Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	archives, err := images.Build(ctx, images.Options{
		RepoRoot: s.repo, OutDir: filepath.Join(s.workDir, "images"),
		ProjectRef: r.project, Binaries: bins, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range archives {
		r.archives = append(r.archives, a.Path)
		if a.Ref == r.pause {
			r.pauseArchive = a.Path
		}
	}
	s.images = r
}
