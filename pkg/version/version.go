// Package version holds the one version string of the three binaries, what
// their --version prints and the ssdcache_build_info series.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release version, set at link time by every build (Makefile,
// Dockerfile, hack/release.sh, test/e2e/images):
//
//	-ldflags "-X github.com/ssdcache/ssdcache/pkg/version.Version=0.1.0"
//
// It is the project's only package-level variable that is not a constant:
// -X can set nothing else, and nothing writes it at run time.
var Version = "dev"

// Symbol is Version's name for the linker's -X flag; tests hold the build
// recipes to it, so renaming the package cannot silently unstamp a build.
const Symbol = "github.com/ssdcache/ssdcache/pkg/version.Version"

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the release version (Version above).
	Version string
	// GoVersion is the toolchain that built the binary, e.g. "go1.26.8".
	GoVersion string
	// Revision is the VCS commit the binary was built from, with
	// "-dirty" when the tree had local changes; "" when the build did not
	// record one (a build outside a git checkout, such as `docker build`
	// without .git in its context).
	Revision string
}

// Get returns this binary's build information.
func Get() Info {
	i := Info{Version: Version, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.Revision = revision(bi.Settings)
	}
	return i
}

func revision(settings []debug.BuildSetting) string {
	var rev string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified {
		rev += "-dirty"
	}
	return rev
}

// String is the --version line: "<binary> <version>", then the toolchain
// and, when known, the commit, so a bug report names the exact build.
func (i Info) String(binary string) string {
	s := fmt.Sprintf("%s %s (%s", binary, i.Version, i.GoVersion)
	if i.Revision != "" {
		s += ", commit " + i.Revision
	}
	return s + ")"
}

// RegisterBuildInfo registers ssdcache_build_info{version,goversion,revision}
// with the constant value 1 on reg, so dashboards and alerts can tell which
// release a pod runs (the usual Prometheus *_build_info convention).
func RegisterBuildInfo(reg prometheus.Registerer, i Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   "ssdcache",
		Name:        "build_info",
		Help:        "Always 1; the labels say which ssdcache build is running.",
		ConstLabels: prometheus.Labels{"version": i.Version, "goversion": i.GoVersion, "revision": i.Revision},
	})
	g.Set(1)
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("registering ssdcache_build_info: %w", err)
	}
	return nil
}
