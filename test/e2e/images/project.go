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

// buildProjectImage builds what the repository's Dockerfile builds, for
// each of o.Arches: the cached Debian layer of that architecture plus a
// layer with the project's binaries built for it.
func buildProjectImage(ctx context.Context, o Options) (Archive, error) {
	df, err := readDockerfile(o.RepoRoot)
	if err != nil {
		return Archive{}, err
	}
	var imgs []platformImage
	for _, arch := range o.Arches {
		img, err := projectImage(ctx, o, df, arch)
		if err != nil {
			return Archive{}, fmt.Errorf("linux/%s: %w", arch, err)
		}
		imgs = append(imgs, platformImage{arch: arch, img: img})
	}
	return writeImages(o, o.ProjectRef, imgs)
}

// projectImage is the project image for linux/arch.
func projectImage(ctx context.Context, o Options, df *Dockerfile, arch string) (v1.Image, error) {
	rootfs, err := debianLayer(ctx, o, df.Suite, arch)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(rootfs)
	if err != nil {
		return nil, err
	}
	binaries, err := binariesLayer(ctx, o, df, arch)
	if err != nil {
		return nil, err
	}
	return assembleImage(imageSpec{
		ref: o.ProjectRef, arch: arch, user: df.User, env: df.Env, entrypoint: df.Entrypoint,
		layers: []v1.Layer{uncompressedLayer(data), binaries},
		history: []string{
			fmt.Sprintf("test/e2e/images: %s %s %s, then the Dockerfile's %s", debianScript, df.Suite, arch, strings.Join(rootfsSteps, "; ")),
			fmt.Sprintf("test/e2e/images: go build %s into %s", strings.Join(df.Binaries, " "), df.BinDir),
		},
	})
}

// binariesLayer builds ./cmd/<name> for linux/arch for every binary the
// Dockerfile copies, with projectLDFlags and ${VERSION} set to o.Version,
// into a layer at their COPY destination.
func binariesLayer(ctx context.Context, o Options, df *Dockerfile, arch string) (v1.Layer, error) {
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
	o.Logger.Info("Building Go binaries", "packages", pkgs, "arch", arch)
	ldflags := strings.ReplaceAll(projectLDFlags, "${VERSION}", o.Version)
	if err := (vm.GoBuild{Packages: pkgs, Out: dir + "/", Dir: o.RepoRoot, LDFlags: ldflags, Arch: arch}).Run(ctx); err != nil {
		return nil, err
	}
	return filesLayer(files, nil)
}

// debianLayerPath names the cached Debian layer for suite and arch after a
// hash of suite, arch and the two scripts, so that an edit to either
// rebuilds it. amd64, the e2e's, is left out of the name and the hash, as
// before the image had other architectures.
func debianLayerPath(o Options, suite, arch string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", suite)
	name := "rootfs-" + suite
	if arch != "amd64" {
		fmt.Fprintf(h, "arch %s\n", arch)
		name += "-" + arch
	}
	for _, script := range []string{debianScript, rootfsScript} {
		data, err := os.ReadFile(filepath.Join(o.RepoRoot, script))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n%s", script, len(data), data)
	}
	return filepath.Join(o.CacheDir, "e2e", "images", fmt.Sprintf("%s-%x.tar", name, h.Sum(nil)[:8])), nil
}

// debianLayer returns the path of the cached Debian layer for suite and
// arch, running debianScript first if there is none.
func debianLayer(ctx context.Context, o Options, suite, arch string) (string, error) {
	out, err := debianLayerPath(o, suite, arch)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(out); err == nil {
		o.Logger.Info("Using cached Debian layer", "path", out)
		return out, nil
	}
	log := strings.TrimSuffix(out, ".tar") + ".log"
	o.Logger.Info("Building Debian layer (minutes)", "suite", suite, "arch", arch, "path", out, "log", log)
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(o.RepoRoot, debianScript), suite, out, arch)
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
		return "", fmt.Errorf("%s %s %s %s (full log in %s): %w\n%s", debianScript, suite, out, arch, log, err, output[max(0, len(output)-4096):])
	}
	o.Logger.Info("Built Debian layer", "path", out, "duration", time.Since(start).Round(time.Second))
	return out, nil
}
