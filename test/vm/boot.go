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
	qemuOut bytes.Buffer
	sim     *nbd.Sim
	// run ends qemu (exec.CommandContext kills it) on the caller's context,
	// the timeout (errTimedOut) or Kill (errKilled); its cause says which.
	run      context.Context
	kill     context.CancelCauseFunc
	duration time.Duration
	waitErr  error
	done     chan struct{}
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
	socket := filepath.Join(sockDir, "hdd.sock")
	// The HDD serves until qemu has exited, whatever happens to ctx.
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	sim, err := nbd.StartSim(simCtx, nbd.SimConfig{Socket: socket, File: v.HDDImage(), Model: model.Defaults(v.cfg.HDDSize)},
		model.RealClock{}, v.logger)
	if err != nil {
		stopSim()
		os.RemoveAll(sockDir)
		return nil, err
	}
	killable, kill := context.WithCancelCause(ctx)
	run, stopTimer := context.WithTimeoutCause(killable, v.cfg.Timeout, errTimedOut)
	b := &Boot{vm: v, sim: sim, run: run, kill: kill, done: make(chan struct{})}
	stop := func() {
		stopTimer()
		kill(nil)
		stopSim()
		if err := sim.Wait(); err != nil {
			v.logger.Error(err, "HDD simulator ended with an error")
		}
		os.RemoveAll(sockDir)
	}
	start := time.Now()
	if err := b.startQEMU(socket); err != nil {
		stop()
		return nil, err
	}
	go func() {
		b.waitErr = b.cmd.Wait()
		b.duration = time.Since(start)
		stop()
		close(b.done)
	}()
	return b, nil
}

func (v *VM) writeGuestFiles(script string) error {
	for _, name := range []string{"rc", "stdout", "stderr", "boot.log"} {
		if err := os.Remove(v.guestFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("vm: clearing %s: %w", name, err)
		}
	}
	if err := os.WriteFile(v.guestFile("init.sh"), guestInit, 0o755); err != nil {
		return fmt.Errorf("vm: writing guest init: %w", err)
	}
	return os.WriteFile(v.guestFile("script.sh"), []byte(script), 0o644)
}

func (b *Boot) startQEMU(nbdSocket string) error {
	name, args := b.vm.qemuCommand(nbdSocket)
	b.cmd = exec.CommandContext(b.run, name, args...)
	b.cmd.Env = append(os.Environ(), "LC_ALL=C")
	b.cmd.Stdout, b.cmd.Stderr = &b.qemuOut, &b.qemuOut
	// qemu must not outlive the harness (a test binary killed on timeout).
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("vm: starting %s: %w", b.vm.cfg.QEMU, err)
	}
	b.vm.logger.Info("VM booting", "workDir", b.vm.cfg.WorkDir, "pid", b.cmd.Process.Pid)
	return nil
}

// Kill cuts the VM's power: qemu gets SIGKILL, so writes the guest had not
// flushed to the emulated disks may be lost, as in a real power failure.
func (b *Boot) Kill() { b.kill(errKilled) }

// Done is closed when qemu has exited (the guest powered off or was killed).
func (b *Boot) Done() <-chan struct{} { return b.done }

// StdoutPath is the host file the guest script's stdout goes to, readable while it runs.
func (b *Boot) StdoutPath() string { return b.vm.guestFile("stdout") }

// Wait blocks until qemu has exited and collects the result. An error means
// the harness itself failed (qemu did not start properly); a script that
// failed or never finished is reported in Result.
func (b *Boot) Wait() (*Result, error) {
	<-b.done
	read := func(path string) string { data, _ := os.ReadFile(path); return string(data) }
	v := b.vm
	res := &Result{
		Stdout: read(v.guestFile("stdout")), Stderr: read(v.guestFile("stderr")), BootLog: read(v.guestFile("boot.log")),
		Console: read(v.consolePath()), ExitCode: -1, Duration: b.duration,
	}
	if rc, err := strconv.Atoi(strings.TrimSpace(read(v.guestFile("rc")))); err == nil {
		res.ExitCode, res.Finished = rc, true
	}
	res.HDDOps, res.HDDBusy = b.sim.Actuator.Stats()
	if b.waitErr == nil { // qemu powered off by itself
		return res, nil
	}
	// Why qemu ended: errTimedOut, errKilled, or context.Canceled when it
	// died by itself or the caller's context ended.
	cause := context.Cause(b.run)
	res.TimedOut = errors.Is(cause, errTimedOut)
	if !res.Finished && !res.TimedOut && !errors.Is(cause, errKilled) {
		return res, fmt.Errorf("vm: qemu failed: %v: %s", b.waitErr, strings.TrimSpace(b.qemuOut.String()))
	}
	return res, nil
}
