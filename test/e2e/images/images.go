// Package images assembles the e2e cluster's container images as OCI
// image-layout tar archives, without a registry or a Docker engine, for
// "ctr -n k8s.io images import --platform linux/amd64 X.tar" in the guest,
// and the release's project image for linux/amd64 and linux/arm64.
//
// The project image reproduces the repository's Dockerfile, whose final
// stage (base suite, copied binaries, ENV, USER, ENTRYPOINT) is parsed from
// the file itself. Its Debian layer is made by hack/image/debian.sh
// (debootstrap, then hack/image/rootfs.sh in a chroot), which takes minutes,
// and is cached under CacheDir/e2e/images; a warm build only compiles the
// binaries and writes the archive. Other architectures than the host's are
// built under qemu-user (hack/image/emulate.sh), several times slower.
// Single-binary images (pause, CSI sidecars) have one layer and are amd64.
package images

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"k8s.io/klog/v2"
)

// Options says which images to build and where.
type Options struct {
	// RepoRoot is the repository root (Dockerfile, cmd/). Required with ProjectRef.
	RepoRoot string
	// CacheDir holds the cached Debian layer under CacheDir/e2e/images;
	// defaults to ${CACHE_DIR:-~/.cache/ssdcache}.
	CacheDir string
	// OutDir receives one <ref>.tar per image. Required; created if missing.
	OutDir string
	// ProjectRef names the project image, e.g. "docker.io/ssdcache/ssdcache:e2e";
	// empty skips it.
	ProjectRef string
	// Arches are the project image's architectures, each both the Debian
	// and the Go name: amd64 (the default, the e2e's) or arm64. More than
	// one writes an image index with a manifest per linux/<arch>.
	Arches []string
	// Version is what the project image's binaries report (the Dockerfile's
	// ${VERSION}); defaults to "e2e". hack/release.sh passes the release's.
	Version string
	// Binaries are single static binary images (sidecars, pause).
	Binaries []BinaryImage
	// Logger defaults to klog's background logger.
	Logger klog.Logger
}

// BinaryImage is an image holding one static binary at Entrypoint[0].
type BinaryImage struct {
	Ref        string
	Binary     string // host path of the static binary
	Entrypoint []string
}

// Archive is one written image archive.
type Archive struct {
	Ref, Path string
}

// Build writes the archives o asks for and returns them, project image first.
func Build(ctx context.Context, o Options) ([]Archive, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var archives []Archive
	if o.ProjectRef != "" {
		a, err := buildProjectImage(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("project image %s: %w", o.ProjectRef, err)
		}
		archives = append(archives, a)
	}
	for _, bi := range o.Binaries {
		a, err := buildBinaryImage(o, bi)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", bi.Ref, err)
		}
		archives = append(archives, a)
	}
	return archives, nil
}

func (o Options) withDefaults() Options {
	if o.Logger.GetSink() == nil {
		o.Logger = klog.Background()
	}
	o.Version = cmp.Or(o.Version, e2eVersion)
	if len(o.Arches) == 0 {
		o.Arches = []string{"amd64"}
	}
	o.CacheDir = cmp.Or(o.CacheDir, os.Getenv("CACHE_DIR"))
	if home, err := os.UserHomeDir(); o.CacheDir == "" && err == nil {
		o.CacheDir = filepath.Join(home, ".cache", "ssdcache")
	}
	return o
}

func (o Options) validate() error {
	if o.OutDir == "" {
		return fmt.Errorf("Options.OutDir is empty; want the directory for the .tar archives")
	}
	// The version lands inside -ldflags, which go build splits at spaces
	// and quotes.
	if strings.ContainsAny(o.Version, " \t\n'\"\\") {
		return fmt.Errorf("Options.Version %q: want no spaces, quotes or backslashes (it is passed in -ldflags)", o.Version)
	}
	for i, arch := range o.Arches {
		if !supportedArch(arch) || slices.Contains(o.Arches[:i], arch) {
			return fmt.Errorf("Options.Arches %q: %q is not allowed: want amd64 and/or arm64, each at most once", o.Arches, arch)
		}
	}
	var refs []string
	if o.ProjectRef != "" {
		refs = append(refs, o.ProjectRef)
	}
	for _, bi := range o.Binaries {
		if len(bi.Entrypoint) == 0 || !path.IsAbs(bi.Entrypoint[0]) {
			return fmt.Errorf("image %s: Entrypoint %q: want an absolute path to place the binary at, then its arguments", bi.Ref, bi.Entrypoint)
		}
		refs = append(refs, bi.Ref)
	}
	// containerd stores an image under exactly its ref and the kubelet looks
	// it up by its normalised form, so a short name like "pause:1" would
	// never be found.
	for _, ref := range refs {
		if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
			return fmt.Errorf("image ref %q: want a fully qualified registry/repository:tag, e.g. docker.io/ssdcache/ssdcache:e2e (%v)", ref, err)
		}
	}
	return nil
}

// supportedArch says whether the project image can be built for arch:
// hack/image/emulate.sh knows its qemu, and Debian, Go and OCI name it alike.
func supportedArch(arch string) bool {
	return arch == "amd64" || arch == "arm64"
}

// archivePath turns a ref into a file name in OutDir.
func archivePath(outDir, ref string) string {
	return filepath.Join(outDir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
}

// buildBinaryImage writes an image of bi's binary at its entrypoint (0755)
// and /tmp (01777).
func buildBinaryImage(o Options, bi BinaryImage) (Archive, error) {
	dest := path.Clean(bi.Entrypoint[0])
	layer, err := filesLayer([]imageFile{{dest, bi.Binary}}, map[string]int64{"/tmp": 0o1777})
	if err != nil {
		return Archive{}, err
	}
	return writeImage(o, imageSpec{ref: bi.Ref, arch: "amd64", entrypoint: bi.Entrypoint, layers: []v1.Layer{layer},
		history: []string{"test/e2e/images: " + filepath.Base(bi.Binary) + " at " + bi.Entrypoint[0]}})
}
