// Package version holds the one version string of the three binaries, what
// their --version prints and the ssdcache_build_info series. The build's
// revision and toolchain come from prometheus/common/version and the series
// from client_golang's collectors/version; only the release version is ours.
package version

import (
	"fmt"

	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	commonversion "github.com/prometheus/common/version"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release version, set at link time by every build (Makefile,
// Dockerfile, hack/release.sh, test/e2e/images):
//
//	-ldflags "-X github.com/ssdcache/ssdcache/pkg/version.Version=0.1.0"
//
// It is the project's only package-level variable that is not a constant:
// -X can set nothing else, and nothing writes it at run time. It stays ours
// rather than prometheus/common's Version, which is "" when a build does not
// stamp it; "dev" tells an unstamped build apart.
var Version = "dev"

// Symbol is Version's name for the linker's -X flag; tests hold the build
// recipes to it, so renaming the package cannot silently unstamp a build.
const Symbol = "github.com/ssdcache/ssdcache/pkg/version.Version"

// unknownRevision is what prometheus/common/version reports for a build
// that recorded no VCS commit (a build outside a git checkout, such as
// `docker build` without .git in its context, or a test binary).
const unknownRevision = "unknown"

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the release version (Version above).
	Version string
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
	// Revision is the VCS commit the binary was built from, with
	// "-modified" when the tree had local changes, or "unknown".
	Revision string
}

// Get returns this binary's build information.
func Get() Info {
	return Info{Version: Version, GoVersion: commonversion.GoVersion, Revision: commonversion.GetRevision()}
}

// String is the --version line: "<binary> <version>", then the toolchain
// and, when known, the commit, so a bug report names the exact build. One
// line, unlike prometheus/common's Print, whose build user, date and branch
// no ssdcache build sets.
func (i Info) String(binary string) string {
	s := fmt.Sprintf("%s %s (%s", binary, i.Version, i.GoVersion)
	if i.Revision != "" && i.Revision != unknownRevision {
		s += ", commit " + i.Revision
	}
	return s + ")"
}

// RegisterBuildInfo registers ssdcache_build_info, the usual Prometheus
// *_build_info series of constant value 1 (client_golang's version
// collector: version, revision, branch, goversion, goos, goarch and tags
// labels), on reg, so dashboards and alerts can tell which release a pod
// runs. The version and revision labels are i's.
func RegisterBuildInfo(reg prometheus.Registerer, i Info) error {
	c := versioncollector.NewCollector("ssdcache", versioncollector.WithExtraConstLabels(
		prometheus.Labels{"version": i.Version, "revision": i.Revision}))
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("registering ssdcache_build_info: %w", err)
	}
	return nil
}
