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
	vm      *VM
	cmd     *exec.Cmd
	qemuErr bytes.Buffer
	sim     *nbd.Sim
	stopSim context.CancelFunc
	// run ends qemu (exec.CommandContext kills it) on the caller's context,
	// the timeout (errTimedOut) or Kill (errKilled).
	run      context.Context
	kill     context.CancelCauseFunc
	start    time.Time
	end      time.Time
	timedOut bool
	killed   bool
	done     chan struct{}
	waitErr  error
	sockDir  string
}

var (
	errTimedOut = errors.New("vm: Config.Timeout reached")
	errKilled   = errors.New("vm: Boot.Kill")
)

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
	b := &Boot{vm: v, done: make(chan struct{}), sockDir: sockDir}
	if err := b.startSim(ctx); err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	killable, kill := context.WithCancelCause(ctx)
	run, stopTimer := context.WithTimeoutCause(killable, v.cfg.Timeout, errTimedOut)
	b.run, b.kill = run, kill
	if err := b.startQEMU(); err != nil {
		stopTimer()
		b.stopSim()
		b.sim.Wait()
		os.RemoveAll(sockDir)
		return nil, err
	}
	go b.supervise(stopTimer)
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
	b.cmd = exec.CommandContext(b.run, name, argv...)
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

// supervise waits for qemu to exit or be killed, then stops the NBD server.
func (b *Boot) supervise(stopTimer context.CancelFunc) {
	b.waitErr = b.cmd.Wait()
	b.end = time.Now()
	if b.waitErr != nil { // qemu did not power off by itself: why was it ended?
		b.timedOut = errors.Is(context.Cause(b.run), errTimedOut)
		b.killed = errors.Is(context.Cause(b.run), errKilled)
	}
	stopTimer()
	b.kill(nil)
	b.stopSim()
	if simErr := b.sim.Wait(); simErr != nil {
		b.vm.logger.Error(simErr, "HDD simulator ended with an error")
	}
	os.RemoveAll(b.sockDir)
	close(b.done)
}

// Kill cuts the VM's power: qemu gets SIGKILL, so writes the guest had not
// flushed to the emulated disks may be lost, as in a real power failure.
func (b *Boot) Kill() { b.kill(errKilled) }

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
	if !res.Finished && !res.TimedOut && b.waitErr != nil && !b.killed {
		return res, fmt.Errorf("vm: qemu failed: %v: %s", b.waitErr, strings.TrimSpace(b.qemuErr.String()))
	}
	return res, nil
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
