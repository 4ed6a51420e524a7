package images

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/exec"
)

// BenchmarkWarmProjectBuild times a warm Build of the project image (Debian
// layer cached) against the reference of only compiling its binaries, the
// part a warm build cannot skip, measured side by side in the same run.
//
//	SSDCACHE_E2E=1 go test -run '^$' -bench WarmProjectBuild -benchtime 3x ./test/e2e/images/
func BenchmarkWarmProjectBuild(b *testing.B) {
	if os.Getenv(enableEnv) != "1" {
		b.Skipf("needs the Debian layer (debootstrap, root); set %s=1 to run", enableEnv)
	}
	ctx := context.Background()
	df, err := readDockerfile(repoRoot)
	if err != nil {
		b.Fatal(err)
	}
	o := Options{RepoRoot: repoRoot, CacheDir: cacheDir(b), OutDir: b.TempDir(), ProjectRef: projectRef, Logger: klog.Background().V(1)}
	archives, err := Build(ctx, o) // warms the layer cache and Go's build cache
	if err != nil {
		b.Fatal(err)
	}
	var build, reference time.Duration
	builder := NewBuilder(exec.New())
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := Build(ctx, o); err != nil {
			b.Fatal(err)
		}
		build += time.Since(start)
		start = time.Now()
		if err := builder.buildProjectBinaries(ctx, o.Logger, repoRoot, e2eVersion, df, b.TempDir()); err != nil {
			b.Fatal(err)
		}
		reference += time.Since(start)
	}
	st, err := os.Stat(archives[0].Path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(build)/float64(reference), "build/go-build")
	b.ReportMetric(float64(st.Size())/(1<<20), "archive-MiB")
}
