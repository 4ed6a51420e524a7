package guest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options are the flags every guest program takes.
type Options struct {
	// Name is "demo" or "bench": message prefix and node name.
	Name               string
	NodeBin, BenchBin  string
	HDD, SSD           string
	OutputDir, WorkDir string
	CacheMiB           int64
	Runs               int
	Runtime            time.Duration
	StateDir           string
	AfterReboot        bool
}

// Register adds the shared flags to fs; the defaults that differ between
// the programs come from Name and runtime.
func (o *Options) Register(fs *flag.FlagSet, name string, runtime time.Duration) {
	o.Name = name
	fs.StringVar(&o.NodeBin, "node-bin", "/vmwork/bin/ssdcache-node", "ssdcache-node binary")
	fs.StringVar(&o.BenchBin, "bench-bin", "/vmwork/bin/ssdcache-bench", "ssdcache-bench binary")
	fs.StringVar(&o.HDD, "hdd", "", "the HDD's /dev/disk/by-id path")
	fs.StringVar(&o.SSD, "ssd", "", "the NVMe's /dev/disk/by-id path")
	fs.StringVar(&o.OutputDir, "output-dir", "/vmwork/out", "where the reports and logs go")
	fs.StringVar(&o.WorkDir, "work-dir", "/tmp/"+name, "scratch dir (CSI socket, target links)")
	fs.Int64Var(&o.CacheMiB, "cache-mib", 256, "cache size of every cached target (StorageClass ssdcache.io/cache-size), MiB")
	fs.IntVar(&o.Runs, "runs", 6, "runs per working set")
	fs.DurationVar(&o.Runtime, "runtime", runtime, "time limit per test (ssdcache-bench -runtime)")
	fs.StringVar(&o.StateDir, "state-dir", "/vmwork/state", "ssdcache-node --state-dir; on the share, so hot sets outlive a reboot of the VM as a node's outlive one on its root disk")
	fs.BoolVar(&o.AfterReboot, "after-reboot", false, "the disks were partitioned and their volumes staged by an earlier boot: keep the partitions")
}

// Main is main() of a guest program, after flag.Parse: exit 1 when run
// fails or is interrupted.
func Main(o *Options, run func(context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s guest: FAILED: %v\n", o.Name, err)
		os.Exit(1)
	}
}

// Node is ssdcache-node running on partition 1 of each disk, with the other
// partitions left for references and other caches.
type Node struct {
	Plugin             *Plugin
	HDDParts, SSDParts []string
	Socket             string
}

// StartNode makes the scratch dirs, partitions the disks (sizes in MiB, the
// node's pool first; after a reboot it finds the partitions made before)
// and starts ssdcache-node on the first partitions.
func StartNode(ctx context.Context, o *Options, hddMiB, ssdMiB []int64) (*Node, error) {
	for _, dir := range []string{o.OutputDir, o.WorkDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(o.OutputDir, "ssdcache-node.log")
	if !o.AfterReboot { // else the log and hot sets of the first boot stay
		if err := errors.Join(os.RemoveAll(o.StateDir), os.RemoveAll(logPath)); err != nil {
			return nil, err
		}
	}
	hddParts, err := partition(ctx, o.HDD, hddMiB, o.AfterReboot)
	if err != nil {
		return nil, err
	}
	ssdParts, err := partition(ctx, o.SSD, ssdMiB, o.AfterReboot)
	if err != nil {
		return nil, err
	}
	n := &Node{HDDParts: hddParts, SSDParts: ssdParts, Socket: filepath.Join(o.WorkDir, "csi.sock")}
	args := append(NodeArgs(o.Name+"-node", n.Socket), "--health-probe-address=127.0.0.1:9811",
		"--origin-devices="+hddParts[0], "--cache-devices="+ssdParts[0], "--state-dir="+o.StateDir)
	if n.Plugin, err = startPlugin(ctx, o.NodeBin, n.Socket, logPath, args); err != nil {
		return nil, err
	}
	return n, nil
}

// RunBench runs ssdcache-bench with its output on stdout, where the host
// echoes it.
func (o *Options) RunBench(ctx context.Context, args []string) error {
	o.Step("ssdcache-bench %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, o.BenchBin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ssdcache-bench: %w", err)
	}
	return nil
}

// Step prints a progress line with the time, so slow steps stand out in
// guest.log.
func (o *Options) Step(format string, args ...any) {
	fmt.Printf("%s %s: %s\n", time.Now().Format("15:04:05"), o.Name, fmt.Sprintf(format, args...))
}
