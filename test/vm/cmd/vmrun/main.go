// Command vmrun boots the test VM (see package vm), runs a bash command in
// it and exits with the command's exit code. Guest stdout and stderr are
// copied to this process's stdout and stderr when the guest has powered off.
//
//	go run ./test/vm/cmd/vmrun -work /tmp/vm -c 'ls -l /dev/disk/by-id'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/vm"
)

func main() {
	var cfg vm.Config
	klog.InitFlags(nil)
	flag.StringVar(&cfg.WorkDir, "work", "", "work dir: disk images, console.log, share/ (the guest's /vmwork); reused across runs (required)")
	command := flag.String("c", "", `bash command to run in the guest (required); -c "$(cat FILE)" runs a script`)
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "kill the VM after this long")
	console := flag.Bool("console", false, "print the kernel console and the guest init's log to stderr")
	flag.Parse()
	if *command == "" {
		fmt.Fprintln(os.Stderr, "vmrun: -c COMMAND is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rc, err := run(ctx, cfg, *command, *console)
	stop()
	if err != nil {
		klog.ErrorS(err, "vmrun failed")
		os.Exit(125)
	}
	os.Exit(rc)
}

func run(ctx context.Context, cfg vm.Config, command string, console bool) (int, error) {
	v, err := vm.New(cfg)
	if err != nil {
		return 0, err
	}
	res, err := v.Run(ctx, command)
	if res != nil {
		os.Stdout.WriteString(res.Stdout)
		os.Stderr.WriteString(res.Stderr)
		if console || !res.Finished {
			fmt.Fprintf(os.Stderr, "--- console ---\n%s--- guest init ---\n%s", res.Console, res.BootLog)
		}
		fmt.Fprintf(os.Stderr, "vmrun: exit %d after %.1fs; simulated HDD served %d requests, busy %.1fs\n",
			res.ExitCode, res.Duration.Seconds(), res.HDDOps, res.HDDBusy.Seconds())
	}
	if err != nil {
		return 0, err
	}
	if !res.Finished {
		return 0, fmt.Errorf("vmrun: guest script did not finish (timed out: %v); see %s/console.log", res.TimedOut, cfg.WorkDir)
	}
	return res.ExitCode, nil
}
