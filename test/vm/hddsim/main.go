// Command hddsim serves a sparse file as an NBD export over a unix socket,
// delaying every request by a positional hard-disk model (see the model
// package and test/vm/README.md). qemu uses it as the backend of the emulated
// HDD:
//
//	hddsim -socket /tmp/hdd.sock -file hdd.img -size 4Gi &
//	qemu-system-x86_64 ... -blockdev driver=nbd,node-name=hdd,server.type=unix,server.path=/tmp/hdd.sock,export=hdd
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
	"github.com/ssdcache/ssdcache/test/vm/hddsim/nbd"
)

func main() {
	klog.InitFlags(nil)
	var cfg nbd.SimConfig
	cfg.RegisterFlags(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		klog.ErrorS(err, "hddsim failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg nbd.SimConfig) error {
	sim, err := nbd.StartSim(ctx, cfg, model.RealClock{}, klog.Background())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "hddsim: serving %s on %s\n", cfg.File, cfg.Socket)
	return sim.Wait()
}
