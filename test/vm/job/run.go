package job

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

// Job is one build-boot-collect run (see the package comment); the guest's
// output is kept as guest.log in OutputDir.
type Job struct {
	// Name is "demo" or "bench": message prefix, guest binary and temp dir name.
	Name         string
	GuestPackage string // import path of the guest program
	// GuestArgs follow the shared guest flags (-hdd, -ssd, -output-dir,
	// -cache-mib CacheMiB).
	GuestArgs []string
	CacheMiB  int64
	// VM configures the VM; an empty WorkDir means a fresh temporary dir.
	VM        vm.Config
	OutputDir string
	// Collect copies results from the guest's output dir in the share; it is
	// called whatever happened in the VM, so a failed run can be looked at.
	Collect func(guestOut string) error
	// RebootArgs, when set, boot the VM a second time on the same disks
	// after the first boot's guest program succeeded, with these flags
	// added: the guest powers off without a clean shutdown, so the second
	// boot finds what a node finds after a crash or a power cut.
	RebootArgs []string
}

// Run runs the job. A VM failure wins over a Collect failure.
func (j Job) Run(ctx context.Context) error {
	cfg := j.VM
	if cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "ssdcache-"+j.Name+"-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.WorkDir = dir
	}
	v, err := vm.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s: building ssdcache-node, ssdcache-bench and the guest program (CGO_ENABLED=0)\n", j.Name)
	for _, b := range j.binaries(v.ShareDir()) {
		if err := b.Run(ctx); err != nil {
			return err
		}
	}
	var stdout strings.Builder
	start := time.Now()
	runErr := j.boot(ctx, v, "booting the VM", nil, &stdout)
	if runErr == nil && len(j.RebootArgs) > 0 {
		runErr = j.boot(ctx, v, "booting the VM again after its power-off", j.RebootArgs, &stdout)
	}
	if stdout.Len() > 0 {
		_ = os.MkdirAll(j.OutputDir, 0o755)
		_ = os.WriteFile(filepath.Join(j.OutputDir, "guest.log"), []byte(stdout.String()), 0o644)
	}
	collectErr := j.Collect(filepath.Join(v.ShareDir(), "out"))
	if runErr != nil {
		return runErr
	}
	fmt.Fprintf(os.Stderr, "%s: VM run took %v\n", j.Name, time.Since(start).Round(time.Second))
	return collectErr
}

// boot runs the guest program once, with extra flags, copying its output
// (the script merges stderr into it) to stderr as it comes and appending it
// to stdout.
func (j Job) boot(ctx context.Context, v *vm.VM, what string, extra []string, stdout *strings.Builder) error {
	fmt.Fprintf(os.Stderr, "%s: %s (qemu TCG; the guest's output follows)\n", j.Name, what)
	b, err := v.Start(ctx, j.script(extra))
	if err != nil {
		return err
	}
	follow(b, &prefixWriter{w: os.Stderr, prefix: "  vm| "})
	res, err := b.Wait()
	if res != nil {
		stdout.WriteString(res.Stdout)
	}
	switch {
	case err != nil:
		return err
	case res.TimedOut:
		return fmt.Errorf("the VM timed out after %v; console tail:\n%s", res.Duration.Round(time.Second), Tail(res.Console, 30))
	case !res.Finished:
		return fmt.Errorf("the guest script did not finish (after %v); console tail:\n%s\nboot log:\n%s",
			res.Duration.Round(time.Second), Tail(res.Console, 30), res.BootLog)
	case res.ExitCode != 0:
		return fmt.Errorf("the guest program exited with code %d (see its output above)", res.ExitCode)
	}
	return nil
}

func (j Job) guestBinary() string { return j.Name + "-guest" }

// binaries are the builds into v's share dir: the node plugin, the bench
// and the guest program.
func (j Job) binaries(share string) []vm.GoBuild {
	bin := func(name, pkg string) vm.GoBuild {
		return vm.GoBuild{Packages: []string{pkg}, Out: filepath.Join(share, "bin", name)}
	}
	return []vm.GoBuild{
		bin("ssdcache-node", "github.com/ssdcache/ssdcache/cmd/ssdcache-node"),
		bin("ssdcache-bench", "github.com/ssdcache/ssdcache/cmd/ssdcache-bench"),
		bin(j.guestBinary(), j.GuestPackage),
	}
}

// script runs the guest program with its output merged, so the host echoes
// errors in order with the rest.
func (j Job) script(extra []string) string {
	args := append([]string{vm.GuestWorkDir + "/bin/" + j.guestBinary(), "-hdd", vm.HDDByID, "-ssd", vm.SSDByID,
		"-output-dir", vm.GuestWorkDir + "/out", "-cache-mib", fmt.Sprint(j.CacheMiB)}, j.GuestArgs...)
	args = append(args, extra...)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return "exec " + strings.Join(args, " ") + " 2>&1"
}

// shellQuote quotes an argument for bash unless it is plainly safe; an
// empty one, a flag's empty value, must stay an argument.
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./%=:,+") == "" {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// Main is main() of `make <target>`: run until done or interrupted, and say
// how long it took; doneNote says where the results are.
func Main(target, doneNote string, run func(context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	start := time.Now()
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\nmake %s FAILED after %v: %v\n", target, time.Since(start).Round(time.Second), err)
		os.Exit(1)
	}
	fmt.Printf("\nmake %s: done in %v; %s\n", target, time.Since(start).Round(time.Second), doneNote)
}
