package images

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// buildProjectImage builds what the repository's Dockerfile builds: the
// cached Debian layer plus a layer with the project's binaries.
func (b *Builder) buildProjectImage(ctx context.Context, o Options) (Archive, error) {
	df, err := readDockerfile(o.RepoRoot)
	if err != nil {
		return Archive{}, err
	}
	rootfsPath, err := b.debianLayer(ctx, o, df)
	if err != nil {
		return Archive{}, err
	}
	rootfs, err := newFileLayer(rootfsPath)
	if err != nil {
		return Archive{}, err
	}
	binLayerPath := archivePath(o.OutDir, o.ProjectRef) + ".bin-layer"
	if err := b.writeBinariesLayer(ctx, o, df, binLayerPath); err != nil {
		return Archive{}, err
	}
	defer os.Remove(binLayerPath)
	binaries, err := newFileLayer(binLayerPath)
	if err != nil {
		return Archive{}, err
	}
	spec := imageSpec{
		ref: o.ProjectRef, user: df.User, env: df.Env, entrypoint: df.Entrypoint,
		layers: []v1.Layer{rootfs, binaries},
		history: []string{
			fmt.Sprintf("test/e2e/images: debootstrap %s, then the Dockerfile's %s", df.Suite, joinSteps(df.Steps)),
			fmt.Sprintf("test/e2e/images: go build %s into %s", strings.Join(df.Binaries, " "), df.BinDir),
		},
	}
	return b.writeImage(o, spec)
}

// writeBinariesLayer builds the Dockerfile's binaries and puts them into
// its COPY destination as root-owned executables.
func (b *Builder) writeBinariesLayer(ctx context.Context, o Options, df *Dockerfile, out string) error {
	buildDir, err := os.MkdirTemp(o.OutDir, ".bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(buildDir)
	if err := b.buildProjectBinaries(ctx, o.Logger, o.RepoRoot, o.Version, df, buildDir); err != nil {
		return err
	}
	files := make([]layerFile, 0, len(df.Binaries))
	for _, name := range df.Binaries {
		files = append(files, layerFile{src: filepath.Join(buildDir, name), dest: path.Join(df.BinDir, name), mode: 0o755})
	}
	return writeFilesLayer(out, files, nil)
}

func joinSteps(steps []Step) string {
	s := make([]string, len(steps))
	for i, st := range steps {
		s[i] = st.String()
	}
	return strings.Join(s, "; ")
}
