// Command guest is `make bench`'s guest side, run inside the VM. It cuts each
// disk into a partition for ssdcache-node's pool and one for a "bench" volume
// group that holds the raw references, lvmcache and bcache, so every target
// sits on the same two disks. For each working set it builds every cache
// cold (ssdcache through the real node plugin's CSI API, lvmcache with
// lvconvert-equivalent lvcreate --type cache, bcache with make-bcache), runs
// ssdcache-bench's read convergence test on all five targets side by side,
// and tears the caches down; a last pass on fresh caches measures cold
// writes. Each invocation's report goes to -output-dir/<part>/ for the host
// to merge.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ssdcache/ssdcache/test/demo/guestos"
	"github.com/ssdcache/ssdcache/test/demo/nodeplugin"
)

type options struct {
	nodeBin, benchBin  string
	hdd, ssd           string
	outputDir, workDir string
	cacheMiB           int64
	workingSets        string
	runs               int
	runtime            time.Duration
	readTests          string
	writeTests         string
}

func main() {
	var o options
	flag.StringVar(&o.nodeBin, "node-bin", "/vmwork/bin/ssdcache-node", "ssdcache-node binary")
	flag.StringVar(&o.benchBin, "bench-bin", "/vmwork/bin/ssdcache-bench", "ssdcache-bench binary")
	flag.StringVar(&o.hdd, "hdd", "", "the HDD's /dev/disk/by-id path")
	flag.StringVar(&o.ssd, "ssd", "", "the NVMe's /dev/disk/by-id path")
	flag.StringVar(&o.outputDir, "output-dir", "/vmwork/out", "where the per-part reports and logs go")
	flag.StringVar(&o.workDir, "work-dir", "/tmp/bench", "scratch dir (CSI socket, target links)")
	flag.Int64Var(&o.cacheMiB, "cache-mib", 256, "cache size of every cached target, MiB")
	flag.StringVar(&o.workingSets, "working-sets", "25%,50%,75%", "working sets (percent of the cache), each on cold caches")
	flag.IntVar(&o.runs, "runs", 6, "runs per working set")
	flag.DurationVar(&o.runtime, "runtime", 4*time.Second, "time limit per test (ssdcache-bench -runtime)")
	flag.StringVar(&o.readTests, "read-tests", "seq1m-q8t1-read,seq1m-q1t1-read,rnd4k-q1t1-read", "tests of the convergence runs")
	flag.StringVar(&o.writeTests, "write-tests", "seq1m-q1t1-write,rnd4k-q1t1-write", "tests of the cold-write pass (empty: none)")
	flag.Parse()
	if o.hdd == "" || o.ssd == "" {
		fmt.Fprintln(os.Stderr, "bench guest: -hdd and -ssd are required (by-id paths)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench guest: FAILED:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("%s bench: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// layout is where every target lives.
type layout struct {
	rawHDD, rawSSD string
	caches         []cache
}

const benchVG = "bench"

func run(ctx context.Context, o options) error {
	for _, dir := range []string{o.outputDir, o.workDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	originMiB := 2 * o.cacheMiB
	hddParts, err := guestos.Partition(ctx, o.hdd, []int64{originMiB + 64, 3*originMiB + 64})
	if err != nil {
		return err
	}
	ssdParts, err := guestos.Partition(ctx, o.ssd, []int64{o.cacheMiB + 64, 3*o.cacheMiB + 128})
	if err != nil {
		return err
	}
	p, err := nodeplugin.Start(ctx, nodeplugin.Config{
		Binary: o.nodeBin, OriginDevices: hddParts[:1], CacheDevices: ssdParts[:1],
		Socket: filepath.Join(o.workDir, "csi.sock"), LogPath: filepath.Join(o.outputDir, "ssdcache-node.log"), NodeName: "bench-node",
	})
	if err != nil {
		return err
	}
	defer p.Stop()
	step("ssdcache-node pools on %s and %s", hddParts[0], ssdParts[0])
	l, err := benchLayout(ctx, o, p, hddParts[1], ssdParts[1], originMiB)
	if err != nil {
		return err
	}
	for _, ws := range strings.Split(o.workingSets, ",") {
		part := "ws-" + strings.TrimSuffix(ws, "%")
		if err := pass(ctx, o, l, part, []string{"-working-sets", ws, "-runs", fmt.Sprint(o.runs), "-read-only", "-tests", o.readTests}); err != nil {
			return err
		}
	}
	if o.writeTests == "" {
		return nil
	}
	first := strings.Split(o.workingSets, ",")[0]
	return pass(ctx, o, l, "writes", []string{"-working-sets", first, "-runs", "1", "-tests", o.writeTests})
}

// benchLayout makes the bench VG on the second partitions and the raw
// reference LVs, which stay for the whole run.
func benchLayout(ctx context.Context, o options, p *nodeplugin.Plugin, hddPV, ssdPV string, originMiB int64) (layout, error) {
	for _, args := range [][]string{
		{"modprobe", "bcache"},
		{"pvcreate", "--yes", hddPV, ssdPV},
		{"vgcreate", "--yes", benchVG, hddPV, ssdPV},
	} {
		if _, err := guestos.Run(ctx, args[0], args[1:]...); err != nil {
			return layout{}, err
		}
	}
	if err := lvcreate(ctx, benchVG, "raw_hdd", originMiB, hddPV); err != nil {
		return layout{}, err
	}
	if err := lvcreate(ctx, benchVG, "raw_ssd", o.cacheMiB, ssdPV); err != nil {
		return layout{}, err
	}
	l := layout{rawHDD: "/dev/" + benchVG + "/raw_hdd", rawSSD: "/dev/" + benchVG + "/raw_ssd"}
	l.caches = []cache{
		&ssdcacheLayer{plugin: p, volumeBytes: originMiB << 20, cacheSize: fmt.Sprintf("%dMi", o.cacheMiB)},
		&lvmcacheLayer{vg: benchVG, hddPV: hddPV, ssdPV: ssdPV, originMiB: originMiB, cacheMiB: o.cacheMiB},
		&bcacheLayer{vg: benchVG, hddPV: hddPV, ssdPV: ssdPV, originMiB: originMiB, cacheMiB: o.cacheMiB, link: filepath.Join(o.workDir, "bcache")},
	}
	return l, nil
}

// pass builds every cache cold, runs ssdcache-bench once over all targets
// and tears the caches down again.
func pass(ctx context.Context, o options, l layout, part string, extra []string) error {
	step("%s: creating cold caches", part)
	args := []string{"-target", "raw-hdd=" + l.rawHDD, "-target", "raw-ssd=" + l.rawSSD}
	for _, c := range l.caches {
		dev, dmName, err := c.Create(ctx)
		if err != nil {
			return fmt.Errorf("%s: creating %s: %w", part, c.Name(), err)
		}
		args = append(args, "-target", c.Name()+"="+dev)
		if dmName != "" {
			args = append(args, "-dm-cache", c.Name()+"="+dmName)
		}
		step("%s: %s at %s", part, c.Name(), dev)
	}
	args = append(args, "-ssd-ref", "raw-ssd", "-hdd-ref", "raw-hdd", "-cache-size", fmt.Sprintf("%dMi", o.cacheMiB),
		"-runtime", o.runtime.String(), "-output-dir", filepath.Join(o.outputDir, part))
	args = append(args, extra...)
	describe(ctx, part)
	benchErr := runBench(ctx, o.benchBin, args)
	for _, c := range l.caches {
		if err := c.Destroy(ctx); err != nil {
			return fmt.Errorf("%s: removing %s: %w", part, c.Name(), err)
		}
	}
	return benchErr
}

// describe logs the device-mapper tables and bcache settings, so the report
// shows what each cache really was.
func describe(ctx context.Context, part string) {
	if out, err := guestos.Run(ctx, "dmsetup", "table"); err == nil {
		step("%s: dm tables:\n%s", part, out)
	}
	for _, f := range []string{"cache_mode", "sequential_cutoff"} {
		if data, err := os.ReadFile("/sys/block/bcache0/bcache/" + f); err == nil {
			step("%s: bcache0 %s: %s", part, f, strings.TrimSpace(string(data)))
		}
	}
}

func runBench(ctx context.Context, bin string, args []string) error {
	step("ssdcache-bench %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssdcache-bench: %w", err)
	}
	return nil
}
