// Command mkimages writes the e2e cluster's image archives by hand, and the
// release's image archive for hack/release.sh (-version):
//
//	go run ./test/e2e/images/cmd/mkimages -out /tmp/images \
//	    -project docker.io/ssdcache/ssdcache:e2e \
//	    -binary localhost/pause:e2e=/tmp/pause:/pause
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/e2e/images"
)

// binaryFlags collects -binary REF=HOSTPATH:ENTRYPOINT values.
type binaryFlags []images.BinaryImage

func (f *binaryFlags) String() string { return fmt.Sprint(*f) }

func (f *binaryFlags) Set(v string) error {
	ref, rest, ok := strings.Cut(v, "=")
	host, entry, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ref == "" || host == "" || entry == "" {
		return fmt.Errorf("-binary %q: want REF=HOSTPATH:ENTRYPOINT, e.g. localhost/pause:e2e=/tmp/pause:/pause", v)
	}
	*f = append(*f, images.BinaryImage{Ref: ref, Binary: host, Entrypoint: []string{entry}})
	return nil
}

func main() {
	klog.InitFlags(nil)
	var o images.Options
	var binaries binaryFlags
	flag.StringVar(&o.OutDir, "out", "", "directory for the .tar archives (required)")
	flag.StringVar(&o.ProjectRef, "project", "", "ref of the project image; empty skips it")
	flag.StringVar(&o.Version, "version", "", "version the project image's binaries report (the Dockerfile's ${VERSION}); default e2e")
	flag.StringVar(&o.RepoRoot, "repo", ".", "repository root (Dockerfile, cmd/)")
	flag.StringVar(&o.CacheDir, "cache", "", "cache dir; the Debian layer goes under <cache>/e2e/images (default ${CACHE_DIR:-~/.cache/ssdcache})")
	flag.Var(&binaries, "binary", "single-binary image REF=HOSTPATH:ENTRYPOINT (repeatable)")
	flag.Parse()
	o.Binaries = binaries
	o.Logger = klog.Background()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	archives, err := images.Build(ctx, o)
	if err != nil {
		klog.ErrorS(err, "Building images failed")
		klog.Flush()
		os.Exit(1)
	}
	for _, a := range archives {
		fmt.Printf("%s\t%s\n", a.Ref, a.Path)
	}
}
