// Command guest is the demo's guest side, run inside the VM: it cuts each
// disk into a pool partition for ssdcache-node and a reference partition,
// starts the real node plugin on the pool partitions, provisions, stages and
// publishes a cached raw block volume through CSI, and runs ssdcache-bench's
// read-only convergence test on it beside the raw SSD and raw HDD
// references. The report lands in -output-dir for the host to print.
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
	workingSet         string
	runs               int
	runtime            time.Duration
	tests              string
}

func main() {
	var o options
	flag.StringVar(&o.nodeBin, "node-bin", "/vmwork/bin/ssdcache-node", "ssdcache-node binary")
	flag.StringVar(&o.benchBin, "bench-bin", "/vmwork/bin/ssdcache-bench", "ssdcache-bench binary")
	flag.StringVar(&o.hdd, "hdd", "", "the HDD's /dev/disk/by-id path")
	flag.StringVar(&o.ssd, "ssd", "", "the NVMe's /dev/disk/by-id path")
	flag.StringVar(&o.outputDir, "output-dir", "/vmwork/out", "where the report and logs go")
	flag.StringVar(&o.workDir, "work-dir", "/tmp/demo", "scratch dir (CSI socket)")
	flag.Int64Var(&o.cacheMiB, "cache-mib", 256, "cache size of the volume (StorageClass ssdcache.io/cache-size), MiB")
	flag.StringVar(&o.workingSet, "working-set", "50%", "working set, as ssdcache-bench -working-sets takes it")
	flag.IntVar(&o.runs, "runs", 6, "runs")
	flag.DurationVar(&o.runtime, "runtime", 10*time.Second, "time limit per test (ssdcache-bench -runtime)")
	flag.StringVar(&o.tests, "tests", "seq1m-q8t1-read,rnd4k-q1t1-read", "ssdcache-bench -tests")
	flag.Parse()
	if o.hdd == "" || o.ssd == "" {
		fmt.Fprintln(os.Stderr, "demo guest: -hdd and -ssd are required (by-id paths)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo guest: FAILED:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("demo: "+format+"\n", args...) }

func run(ctx context.Context, o options) error {
	for _, dir := range []string{o.outputDir, o.workDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	volumeMiB := 2 * o.cacheMiB
	// Pool partitions first, then reference partitions the node never sees,
	// so the raw references are measured on the same disks, untouched by LVM.
	hddParts, err := guestos.Partition(ctx, o.hdd, []int64{volumeMiB + 64, volumeMiB})
	if err != nil {
		return err
	}
	ssdParts, err := guestos.Partition(ctx, o.ssd, []int64{o.cacheMiB + 64, o.cacheMiB})
	if err != nil {
		return err
	}
	step("HDD pool %s, raw HDD reference %s", hddParts[0], hddParts[1])
	step("SSD pool %s, raw SSD reference %s", ssdParts[0], ssdParts[1])
	p, err := nodeplugin.Start(ctx, nodeplugin.Config{
		Binary: o.nodeBin, OriginDevices: hddParts[:1], CacheDevices: ssdParts[:1],
		Socket: filepath.Join(o.workDir, "csi.sock"), LogPath: filepath.Join(o.outputDir, "ssdcache-node.log"), NodeName: "demo-node",
	})
	if err != nil {
		return err
	}
	defer p.Stop()
	step("ssdcache-node is serving CSI on %s", filepath.Join(o.workDir, "csi.sock"))
	cacheSize := fmt.Sprintf("%dMi", o.cacheMiB)
	v, err := p.CreateVolume(ctx, "pvc-demo", volumeMiB<<20, nodeplugin.ReadCacheParams(cacheSize), nodeplugin.BlockCapability())
	if err != nil {
		return err
	}
	step("CreateVolume: volume %s (%d MiB, ssdcache.io/cache-mode=readcache, ssdcache.io/cache-size=%s)", v.ID, volumeMiB, cacheSize)
	if err := p.StageAndPublish(ctx, v); err != nil {
		return err
	}
	step("NodeStageVolume + NodePublishVolume: raw block volume at %s", v.Target)
	if table, err := guestos.Run(ctx, "dmsetup", "table", nodeplugin.DMName(v.ID)); err == nil {
		step("dm table: %s", table)
	}
	benchErr := runBench(ctx, o, hddParts[1], ssdParts[1], v, cacheSize)
	if err := p.Delete(ctx, v); err != nil && benchErr == nil {
		return err
	}
	step("volume unpublished, unstaged and deleted")
	return benchErr
}

func runBench(ctx context.Context, o options, rawHDD, rawSSD string, v *nodeplugin.Volume, cacheSize string) error {
	args := []string{
		"-target", "raw-hdd=" + rawHDD, "-target", "raw-ssd=" + rawSSD, "-target", "ssdcache=" + v.Target,
		"-dm-cache", "ssdcache=" + nodeplugin.DMName(v.ID), "-ssd-ref", "raw-ssd", "-hdd-ref", "raw-hdd",
		"-cache-size", cacheSize, "-working-sets", o.workingSet, "-runs", fmt.Sprint(o.runs),
		"-read-only", "-tests", o.tests, "-runtime", o.runtime.String(), "-output-dir", o.outputDir,
	}
	step("ssdcache-bench %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, o.benchBin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssdcache-bench: %w", err)
	}
	return nil
}
