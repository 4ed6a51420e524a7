// Command vmrun boots the test VM (see package vm), runs a bash script in it
// and exits with the script's exit code. Guest stdout and stderr are copied
// to this process's stdout and stderr when the guest has powered off.
//
//	vmrun -work /tmp/vm -c 'ls -l /dev/disk/by-id'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm"
)

type options struct {
	cfg     vm.Config
	script  string
	command string
	console bool
}

func parseFlags() (options, error) {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.cfg.WorkDir, "work", "", "work dir: disk images, console.log, share/ (the guest's /vmwork); reused across runs (required)")
	flag.StringVar(&o.script, "script", "", "bash script to run in the guest")
	flag.StringVar(&o.command, "c", "", "bash command to run in the guest (instead of -script)")
	flag.DurationVar(&o.cfg.Timeout, "timeout", 10*time.Minute, "kill the VM after this long")
	flag.IntVar(&o.cfg.MemoryMiB, "mem", 2048, "guest memory in MiB")
	flag.IntVar(&o.cfg.CPUs, "cpus", 2, "guest CPUs")
	flag.BoolVar(&o.console, "console", false, "print the kernel console and the guest init's log to stderr")
	sizeFlag(&o.cfg.HDDSize, "hdd-size", "simulated HDD size (default 4Gi)")
	sizeFlag(&o.cfg.SSDSize, "ssd-size", "emulated NVMe size (default 1Gi)")
	flag.Parse()
	if (o.script == "") == (o.command == "") {
		return o, errors.New("vmrun: give exactly one of -script FILE or -c COMMAND")
	}
	return o, nil
}

func sizeFlag(dst *int64, name, usage string) {
	flag.Func(name, usage, func(s string) error {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return fmt.Errorf("%s=%q: want a size such as 4Gi: %w", name, s, err)
		}
		*dst = q.Value()
		return nil
	})
}

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := run(ctx, o)
	if err != nil {
		klog.ErrorS(err, "vmrun failed")
		os.Exit(125)
	}
	os.Exit(rc)
}

func run(ctx context.Context, o options) (int, error) {
	script := o.command
	if o.script != "" {
		data, err := os.ReadFile(o.script)
		if err != nil {
			return 0, fmt.Errorf("vmrun: -script: %w", err)
		}
		script = string(data)
	}
	v, err := vm.New(o.cfg)
	if err != nil {
		return 0, err
	}
	res, err := v.Run(ctx, script)
	if res != nil {
		report(o, res)
	}
	if err != nil {
		return 0, err
	}
	if !res.Finished {
		return 0, fmt.Errorf("vmrun: guest script did not finish (timed out: %v); see %s/console.log", res.TimedOut, o.cfg.WorkDir)
	}
	return res.ExitCode, nil
}

func report(o options, res *vm.Result) {
	os.Stdout.WriteString(res.Stdout)
	os.Stderr.WriteString(res.Stderr)
	if o.console || !res.Finished {
		fmt.Fprintf(os.Stderr, "--- console ---\n%s--- guest init ---\n%s", res.Console, res.BootLog)
	}
	fmt.Fprintf(os.Stderr, "vmrun: exit %d after %.1fs; simulated HDD served %d requests, busy %.1fs\n",
		res.ExitCode, res.Duration.Seconds(), res.HDDOps, res.HDDBusy.Seconds())
}
