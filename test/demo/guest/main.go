// Command guest is the demo's guest side, run inside the VM: it cuts each
// disk into a pool partition for ssdcache-node and a reference partition,
// starts the real node plugin on the pool partitions, provisions, stages and
// publishes a cached raw block volume through CSI, and runs ssdcache-bench's
// read-only convergence test on it beside the raw SSD and raw HDD
// references, then restages the volume and runs the tests once more. The
// reports land in -output-dir (the restaged run's under restaged/) for the
// host to print.
package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ssdcache/ssdcache/test/vm/guest"
)

// The demo's working set and its read tests, as ssdcache-bench takes them.
const (
	workingSet = "50%"
	tests      = "seq1m-q8t1-read,rnd4k-q1t1-read"
)

func main() {
	var o guest.Options
	o.Register(flag.CommandLine, "demo", 10*time.Second)
	flag.Parse()
	guest.Main(&o, func(ctx context.Context) error { return run(ctx, o) })
}

func run(ctx context.Context, o guest.Options) error {
	volumeMiB := 2 * o.CacheMiB
	// Pool partitions first, then reference partitions the node never sees,
	// so the raw references are measured on the same disks, untouched by LVM.
	n, err := guest.StartNode(ctx, &o, []int64{volumeMiB + 64, volumeMiB}, []int64{o.CacheMiB + 64, o.CacheMiB})
	if err != nil {
		return err
	}
	p := n.Plugin
	defer p.Stop()
	o.Step("HDD pool %s, raw HDD reference %s", n.HDDParts[0], n.HDDParts[1])
	o.Step("SSD pool %s, raw SSD reference %s", n.SSDParts[0], n.SSDParts[1])
	o.Step("ssdcache-node is serving CSI on %s", n.Socket)
	cacheSize := fmt.Sprintf("%dMi", o.CacheMiB)
	v, err := p.CreateVolume(ctx, "pvc-demo", volumeMiB<<20, cacheSize)
	if err != nil {
		return err
	}
	o.Step("CreateVolume, NodeStageVolume, NodePublishVolume: volume %s (%d MiB, ssdcache.io/cache-mode=readcache, ssdcache.io/cache-size=%s) at %s",
		v.ID, volumeMiB, cacheSize, v.Target)
	if table, err := guest.Run(ctx, "dmsetup", "table", guest.DMName(v.ID)); err == nil {
		o.Step("dm table: %s", table)
	}
	benchArgs := func(runs int, outputDir string) []string {
		return []string{
			"-target", "raw-hdd=" + n.HDDParts[1], "-target", "raw-ssd=" + n.SSDParts[1], "-target", "ssdcache=" + v.Target,
			"-dm-cache", "ssdcache=" + guest.DMName(v.ID), "-ssd-ref", "raw-ssd", "-hdd-ref", "raw-hdd",
			"-cache-size", cacheSize, "-working-sets", workingSet, "-runs", fmt.Sprint(runs),
			"-read-only", "-tests", tests, "-runtime", o.Runtime.String(), "-output-dir", outputDir,
		}
	}
	benchErr := o.RunBench(ctx, benchArgs(o.Runs, o.OutputDir))
	if benchErr == nil {
		benchErr = restage(ctx, o, p, v, benchArgs(1, filepath.Join(o.OutputDir, "restaged")))
	}
	if err := p.Delete(ctx, v); err != nil && benchErr == nil {
		return err
	}
	o.Step("volume unpublished, unstaged and deleted")
	return benchErr
}

// restage unstages and stages the volume again, as kubelet does when its
// pod is replaced, and runs the tests once more: the plugin keeps the
// cache's LVs at a clean unstage and maps their blocks again at stage.
func restage(ctx context.Context, o guest.Options, p *guest.Plugin, v *guest.Volume, benchArgs []string) error {
	if err := p.Unstage(ctx, v); err != nil {
		return err
	}
	o.Step("NodeUnpublishVolume + NodeUnstageVolume: device removed, the cache's LVs kept (and its hot set saved)")
	start := time.Now()
	if err := p.StageAndPublish(ctx, v); err != nil {
		return err
	}
	o.Step("NodeStageVolume + NodePublishVolume: the kept cache mapped again, in %.1fs", time.Since(start).Seconds())
	return o.RunBench(ctx, benchArgs)
}
