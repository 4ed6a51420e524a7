// Command mkimages writes the project image's archive for hack/release.sh
// (-version, -arch amd64,arm64), or by hand:
//
//	go run ./test/e2e/images/cmd/mkimages -out /tmp/images \
//	    -project docker.io/ssdcache/ssdcache:e2e
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

func main() {
	klog.InitFlags(nil)
	var o images.Options
	flag.StringVar(&o.OutDir, "out", "", "directory for the .tar archives (required)")
	flag.StringVar(&o.ProjectRef, "project", "", "ref of the project image (required)")
	flag.StringVar(&o.Version, "version", "", "version the project image's binaries report (the Dockerfile's ${VERSION}); default e2e")
	flag.StringVar(&o.RepoRoot, "repo", ".", "repository root (Dockerfile, cmd/)")
	arches := flag.String("arch", "amd64", "comma-separated architectures of the project image, amd64 and/or arm64; "+
		"several give one archive with an image index (a foreign one is built under qemu-user)")
	flag.StringVar(&o.CacheDir, "cache", "", "cache dir; the Debian layer goes under <cache>/e2e/images (default ${CACHE_DIR:-~/.cache/ssdcache})")
	flag.Parse()
	o.Arches = strings.Split(*arches, ",")
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
