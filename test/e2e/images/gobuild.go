package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/exec"
)

// e2eVersion is what the binaries report as their version in the e2e
// image unless Options.Version says otherwise.
const e2eVersion = "e2e"

// BuildStatic builds the Go main package pkg (e.g. "./test/e2e/images/pause")
// of the module at repoRoot into the file out as a static, stripped
// linux/amd64 binary: the kind a single-binary image needs.
func BuildStatic(ctx context.Context, repoRoot, pkg, out string) error {
	return NewBuilder(exec.New()).BuildStatic(ctx, repoRoot, pkg, out)
}

// BuildStatic is the package-level BuildStatic through b's exec.
func (b *Builder) BuildStatic(ctx context.Context, repoRoot, pkg, out string) error {
	if repoRoot == "" || pkg == "" || out == "" {
		return fmt.Errorf("BuildStatic: repoRoot %q, pkg %q and out %q must all be set", repoRoot, pkg, out)
	}
	return b.goBuild(ctx, b.logger, repoRoot, "-s -w", out, pkg)
}

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

// goBuild runs "go build -trimpath" with CGO disabled; out ending in a path
// separator is a directory that receives one binary per package. "go" is
// looked up on PATH, where "go test" and "go run" put their own toolchain.
func (b *Builder) goBuild(ctx context.Context, logger klog.Logger, repoRoot, ldflags, out string, pkgs ...string) error {
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags, "-o", out}
	args = append(args, pkgs...)
	logger.Info("Building Go binaries", "packages", pkgs, "out", out)
	return run(ctx, b.exec, command{name: "go", args: args, dir: repoRoot, env: goEnv()})
}
