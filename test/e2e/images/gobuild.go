package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/version"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm"
)

// e2eVersion is what the binaries report as their version in the e2e
// image unless Options.Version says otherwise.
const e2eVersion = "e2e"

// projectLDFlags is the -ldflags of the Dockerfile's go build (a test keeps
// the two equal), ${VERSION} left for buildProjectBinaries to set.
const projectLDFlags = "-s -w -X " + version.Symbol + "=${VERSION}"

// buildProjectBinaries builds ./cmd/<name> for every binary the Dockerfile
// copies, with projectLDFlags and ${VERSION} set to version, into dir.
func (b *Builder) buildProjectBinaries(ctx context.Context, logger klog.Logger, repoRoot, version string, df *Dockerfile, dir string) error {
	pkgs := make([]string, 0, len(df.Binaries))
	for _, name := range df.Binaries {
		if _, err := os.Stat(filepath.Join(repoRoot, "cmd", name)); err != nil {
			return fmt.Errorf("Dockerfile copies binary %q but %s/cmd/%s is not a package: %w", name, repoRoot, name, err)
		}
		pkgs = append(pkgs, "./cmd/"+name)
	}
	ldflags := strings.ReplaceAll(projectLDFlags, "${VERSION}", version)
	return b.goBuild(ctx, logger, repoRoot, ldflags, dir+string(filepath.Separator), pkgs...)
}

// goBuild builds pkgs statically (vm.GoBuild); out ending in a path
// separator is a directory that receives one binary per package.
func (b *Builder) goBuild(ctx context.Context, logger klog.Logger, repoRoot, ldflags, out string, pkgs ...string) error {
	logger.Info("Building Go binaries", "packages", pkgs, "out", out)
	return vm.GoBuild{Packages: pkgs, Out: out, Dir: repoRoot, LDFlags: ldflags}.Run(ctx)
}
