package images

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/version"
	"github.com/ssdcache/ssdcache/test/vm"
)

// e2eVersion is what the binaries report as their version in the e2e
// image unless Options.Version says otherwise.
const e2eVersion = "e2e"

// projectLDFlags is the -ldflags of the Dockerfile's go build (a test keeps
// the two equal), ${VERSION} left for writeBinariesLayer to set.
const projectLDFlags = "-s -w -X " + version.Symbol + "=${VERSION}"

// buildProjectImage builds what the repository's Dockerfile builds: the
// cached Debian layer plus a layer with the project's binaries.
func (b *Builder) buildProjectImage(ctx context.Context, o Options) (Archive, error) {
	df, err := readDockerfile(o.RepoRoot)
	if err != nil {
		return Archive{}, err
	}
	rootfs, err := b.debianLayer(ctx, o, df)
	if err != nil {
		return Archive{}, err
	}
	work, err := os.MkdirTemp(o.OutDir, ".image-")
	if err != nil {
		return Archive{}, err
	}
	defer os.RemoveAll(work)
	binaries := filepath.Join(work, "layer.tar")
	if err := b.writeBinariesLayer(ctx, o, df, filepath.Join(work, "stage"), binaries); err != nil {
		return Archive{}, err
	}
	spec := imageSpec{
		ref: o.ProjectRef, user: df.User, env: df.Env, entrypoint: df.Entrypoint,
		layers: []string{rootfs, binaries},
		history: []string{
			fmt.Sprintf("test/e2e/images: debootstrap %s, then the Dockerfile's %s", df.Suite, joinSteps(df.Steps)),
			fmt.Sprintf("test/e2e/images: go build %s into %s", strings.Join(df.Binaries, " "), df.BinDir),
		},
	}
	return b.writeImage(ctx, o, work, spec)
}

// writeBinariesLayer builds ./cmd/<name> for every binary the Dockerfile
// copies, with projectLDFlags and ${VERSION} set to o.Version, into its
// COPY destination under stage, and writes them to out as a layer.
func (b *Builder) writeBinariesLayer(ctx context.Context, o Options, df *Dockerfile, stage, out string) error {
	dir := filepath.Join(stage, df.BinDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var pkgs, files []string
	for _, name := range df.Binaries {
		pkgs = append(pkgs, "./cmd/"+name)
		files = append(files, path.Join(df.BinDir, name))
	}
	o.Logger.Info("Building Go binaries", "packages", pkgs, "out", dir)
	ldflags := strings.ReplaceAll(projectLDFlags, "${VERSION}", o.Version)
	if err := (vm.GoBuild{Packages: pkgs, Out: dir + "/", Dir: o.RepoRoot, LDFlags: ldflags}).Run(ctx); err != nil {
		return err
	}
	return b.writeFilesLayer(ctx, stage, out, files, nil)
}

func joinSteps(steps []Step) string {
	s := make([]string, len(steps))
	for i, st := range steps {
		s[i] = st.String()
	}
	return strings.Join(s, "; ")
}
