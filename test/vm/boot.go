package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ssdcache/ssdcache/test/vm/hddsim/model"
	"github.com/ssdcache/ssdcache/test/vm/hddsim/nbd"
)

// Result is what one boot brought back.
type Result struct {
	// Stdout and Stderr of the guest script (partial if the boot was killed).
	Stdout, Stderr string
	// ExitCode of the guest script; -1 if it did not finish.
	ExitCode int
	// Finished is false when the script never completed (killed, timed out, crashed).
	Finished bool
	// TimedOut says the boot hit Config.Timeout.
	TimedOut bool
	// Console is the kernel's serial console; BootLog the guest init's notes.
	Console, BootLog string
	// Duration is wall time from qemu start to exit.
	Duration time.Duration
	// HDDOps and HDDBusy are the simulated HDD's request count and modelled busy time.
	HDDOps  int64
	HDDBusy time.Duration
}

// Boot is one running VM.
type Boot struct {
	vm       *VM
	cmd      *exec.Cmd
	qemuErr  bytes.Buffer
	sim      *nbd.Sim
	stopSim  context.CancelFunc
	start    time.Time
	timedOut bool
	end      time.Time
	killed   chan struct{}
	once     sync.Once
	done     chan struct{}
	waitErr  error
	sockDir  string
}

// Run boots the VM, runs script (bash) in the guest with /vmwork as its
// working directory and returns when the guest has powered off.
func (v *VM) Run(ctx context.Context, script string) (*Result, error) {
	b, err := v.Start(ctx, script)
	if err != nil {
		return nil, err
	}
	return b.Wait()
}

// Start boots the VM in the background. The caller must call Wait.
func (v *VM) Start(ctx context.Context, script string) (*Boot, error) {
	if err := v.writeGuestFiles(script); err != nil {
		return nil, err
	}
	sockDir, err := os.MkdirTemp("", "ssdcache-vm-")
	if err != nil {
		return nil, fmt.Errorf("vm: socket dir: %w", err)
	}
	b := &Boot{vm: v, killed: make(chan struct{}), done: make(chan struct{}), sockDir: sockDir}
	if err := b.startSim(ctx); err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	if err := b.startQEMU(); err != nil {
		b.stopSim()
		b.sim.Wait()
		os.RemoveAll(sockDir)
		return nil, err
	}
	go b.supervise(ctx)
	return b, nil
}

func (v *VM) writeGuestFiles(script string) error {
	dir := filepath.Join(v.ShareDir(), ".vm")
	for _, name := range []string{"rc", "stdout", "stderr", "boot.log"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("vm: clearing %s: %w", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sh"), guestInit, 0o755); err != nil {
		return fmt.Errorf("vm: writing guest init: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "script.sh"), []byte(script), 0o644)
}

func (b *Boot) startSim(ctx context.Context) error {
	simCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cfg := nbd.SimConfig{Socket: filepath.Join(b.sockDir, "hdd.sock"), File: b.vm.HDDImage(), Model: model.Defaults(b.vm.cfg.HDDSize)}
	sim, err := nbd.StartSim(simCtx, cfg, model.RealClock{}, b.vm.logger)
	if err != nil {
		cancel()
		return err
	}
	b.sim, b.stopSim = sim, cancel
	return nil
}

func (b *Boot) startQEMU() error {
	cfg := b.vm.cfg
	args := qemuArgs(cfg, qemuPaths{
		kernel: b.vm.kernel, initrd: b.vm.initrd, console: b.ConsolePath(),
		share: b.vm.ShareDir(), ssdImage: b.vm.SSDImage(), nbdSocket: filepath.Join(b.sockDir, "hdd.sock"),
	})
	// `ip netns exec` execs qemu in place, so the pid, Pdeathsig and Kill
	// below still reach qemu itself.
	name, argv := qemuCommand(cfg, args)
	b.cmd = exec.Command(name, argv...)
	b.cmd.Env = append(os.Environ(), "LC_ALL=C")
	b.cmd.Stdout, b.cmd.Stderr = &b.qemuErr, &b.qemuErr
	// qemu must not outlive the harness (a test binary killed on timeout).
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b.start = time.Now()
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("vm: starting %s: %w", cfg.QEMU, err)
	}
	b.vm.logger.Info("VM booting", "workDir", cfg.WorkDir, "pid", b.cmd.Process.Pid)
	return nil
}

// supervise kills qemu on timeout or context end, then stops the NBD server.
func (b *Boot) supervise(ctx context.Context) {
	exited := make(chan error, 1)
	go func() { exited <- b.cmd.Wait() }()
	timer := time.NewTimer(b.vm.cfg.Timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-exited:
	case <-timer.C:
		b.timedOut = true
		b.cmd.Process.Kill()
		err = <-exited
	case <-ctx.Done():
		b.cmd.Process.Kill()
		err = <-exited
	case <-b.killed:
		b.cmd.Process.Kill()
		err = <-exited
	}
	b.end = time.Now()
	b.stopSim()
	if simErr := b.sim.Wait(); simErr != nil {
		b.vm.logger.Error(simErr, "HDD simulator ended with an error")
	}
	os.RemoveAll(b.sockDir)
	b.waitErr = err
	close(b.done)
}

// Kill cuts the VM's power: qemu gets SIGKILL, so writes the guest had not
// flushed to the emulated disks may be lost, as in a real power failure.
func (b *Boot) Kill() { b.once.Do(func() { close(b.killed) }) }

// Done is closed when qemu has exited (the guest powered off or was killed).
func (b *Boot) Done() <-chan struct{} { return b.done }

// ConsolePath is the host file receiving the guest's serial console.
func (b *Boot) ConsolePath() string { return filepath.Join(b.vm.cfg.WorkDir, "console.log") }

// StdoutPath is the host file the guest script's stdout goes to, readable while it runs.
func (b *Boot) StdoutPath() string { return filepath.Join(b.vm.ShareDir(), ".vm", "stdout") }

// Wait blocks until qemu has exited and collects the result. An error means
// the harness itself failed (qemu did not start properly); a script that
// failed or never finished is reported in Result.
func (b *Boot) Wait() (*Result, error) {
	<-b.done
	res := b.collect()
	if !res.Finished && !res.TimedOut && b.waitErr != nil && !b.wasKilled() {
		return res, fmt.Errorf("vm: qemu failed: %v: %s", b.waitErr, strings.TrimSpace(b.qemuErr.String()))
	}
	return res, nil
}

func (b *Boot) wasKilled() bool {
	select {
	case <-b.killed:
		return true
	default:
		return false
	}
}

func (b *Boot) collect() *Result {
	dir := filepath.Join(b.vm.ShareDir(), ".vm")
	read := func(name string) string { data, _ := os.ReadFile(filepath.Join(dir, name)); return string(data) }
	console, _ := os.ReadFile(b.ConsolePath())
	res := &Result{
		Stdout: read("stdout"), Stderr: read("stderr"), BootLog: read("boot.log"),
		Console: string(console), ExitCode: -1, TimedOut: b.timedOut, Duration: b.end.Sub(b.start),
	}
	if rc, err := strconv.Atoi(strings.TrimSpace(read("rc"))); err == nil {
		res.ExitCode, res.Finished = rc, true
	}
	res.HDDOps, res.HDDBusy = b.sim.Actuator.Stats()
	return res
}
