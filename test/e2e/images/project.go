package images

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ssdcache/ssdcache/pkg/version"
	"github.com/ssdcache/ssdcache/test/vm"
)

// e2eVersion is what the binaries report as their version in the e2e
// image unless Options.Version says otherwise.
const e2eVersion = "e2e"

// projectLDFlags is the -ldflags of the Dockerfile's go build (a test keeps
// the two equal), ${VERSION} left for buildProjectImage to set.
const projectLDFlags = "-s -w -X " + version.Symbol + "=${VERSION}"

// debianScript builds the Debian layer: debootstrap, then rootfsScript in
// a chroot as the Dockerfile's rootfsSteps.
const (
	debianScript = "hack/image/debian.sh"
	rootfsScript = "hack/image/rootfs.sh"
)

// buildProjectImage builds what the repository's Dockerfile builds: the
// cached Debian layer plus a layer with the project's binaries.
func buildProjectImage(ctx context.Context, o Options) (Archive, error) {
	df, err := readDockerfile(o.RepoRoot)
	if err != nil {
		return Archive{}, err
	}
	rootfs, err := debianLayer(ctx, o, df.Suite)
	if err != nil {
		return Archive{}, err
	}
	data, err := os.ReadFile(rootfs)
	if err != nil {
		return Archive{}, err
	}
	binaries, err := binariesLayer(ctx, o, df)
	if err != nil {
		return Archive{}, err
	}
	return writeImage(o, imageSpec{
		ref: o.ProjectRef, user: df.User, env: df.Env, entrypoint: df.Entrypoint,
		layers: []v1.Layer{uncompressedLayer(data), binaries},
		history: []string{
			fmt.Sprintf("test/e2e/images: %s %s, then the Dockerfile's %s", debianScript, df.Suite, strings.Join(rootfsSteps, "; ")),
			fmt.Sprintf("test/e2e/images: go build %s into %s", strings.Join(df.Binaries, " "), df.BinDir),
		},
	})
}

// binariesLayer builds ./cmd/<name> for every binary the Dockerfile copies,
// with projectLDFlags and ${VERSION} set to o.Version, into a layer at
// their COPY destination.
func binariesLayer(ctx context.Context, o Options, df *Dockerfile) (v1.Layer, error) {
	dir, err := os.MkdirTemp(o.OutDir, ".binaries-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var pkgs []string
	var files []imageFile
	for _, name := range df.Binaries {
		pkgs = append(pkgs, "./cmd/"+name)
		files = append(files, imageFile{path.Join(df.BinDir, name), filepath.Join(dir, name)})
	}
	o.Logger.Info("Building Go binaries", "packages", pkgs)
	ldflags := strings.ReplaceAll(projectLDFlags, "${VERSION}", o.Version)
	if err := (vm.GoBuild{Packages: pkgs, Out: dir + "/", Dir: o.RepoRoot, LDFlags: ldflags}).Run(ctx); err != nil {
		return nil, err
	}
	return filesLayer(files, nil)
}

// debianLayerPath names the cached Debian layer for suite after a hash of
// suite and the two scripts, so that an edit to either rebuilds it.
func debianLayerPath(o Options, suite string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", suite)
	for _, script := range []string{debianScript, rootfsScript} {
		data, err := os.ReadFile(filepath.Join(o.RepoRoot, script))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n%s", script, len(data), data)
	}
	return filepath.Join(o.CacheDir, "e2e", "images", fmt.Sprintf("rootfs-%s-%x.tar", suite, h.Sum(nil)[:8])), nil
}

// debianLayer returns the path of the cached Debian layer for suite,
// running debianScript first if there is none.
func debianLayer(ctx context.Context, o Options, suite string) (string, error) {
	out, err := debianLayerPath(o, suite)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(out); err == nil {
		o.Logger.Info("Using cached Debian layer", "path", out)
		return out, nil
	}
	log := strings.TrimSuffix(out, ".tar") + ".log"
	o.Logger.Info("Building Debian layer (minutes)", "suite", suite, "path", out, "log", log)
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(o.RepoRoot, debianScript), suite, out)
	// A stable locale so messages can be quoted; sbin for debootstrap and
	// chroot; the rest for apt in the chroot.
	cmd.Env = []string{"LC_ALL=C", defaultPath, "DEBIAN_FRONTEND=noninteractive", "HOME=/root"}
	// Cancelled, the script and its children get SIGTERM, so that its trap
	// can unmount /proc in the chroot and remove the tree.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if output, err := cmd.CombinedOutput(); err != nil {
		if len(output) == 0 { // the script got as far as its log
			output, _ = os.ReadFile(log)
		}
		return "", fmt.Errorf("%s %s %s (full log in %s): %w\n%s", debianScript, suite, out, log, err, output[max(0, len(output)-4096):])
	}
	o.Logger.Info("Built Debian layer", "path", out, "duration", time.Since(start).Round(time.Second))
	return out, nil
}
