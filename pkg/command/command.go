// Package command runs the node's storage tools (dmsetup, lvm, wipefs, blockdev)
// through an injected k8s.io/utils/exec.Interface, so every caller can be tested
// with a fake and every invocation is logged and parsed the same way.
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/exec"
)

// Runner runs external commands with a stable locale, so that their output can
// be parsed regardless of the node's language settings.
type Runner struct {
	exec    exec.Interface
	env     []string
	timeout time.Duration
}

// DefaultTimeout ends a storage command that has hung (a dead disk under a
// scan, a VG lock never released) so that it cannot hold a volume's lock and
// every later reconcile forever. It is far above what the slowest node needs
// for one dmsetup, lvm, wipefs or blockdev call.
const DefaultTimeout = 10 * time.Minute

// toolVariables change how the storage tools work and are passed on to them:
// DM_DISABLE_UDEV lets libdevmapper make /dev/mapper nodes itself where no
// udevd shares its IPC namespace (a container), LVM_SYSTEM_DIR moves lvm.conf.
var toolVariables = []string{"DM_DISABLE_UDEV", "LVM_SYSTEM_DIR"}

// NewRunner returns a Runner that executes commands through e. Of environ
// (the caller's environment, as os.Environ), only the variables that change
// how the tools work reach them, beside LC_ALL=C and a fixed PATH.
func NewRunner(e exec.Interface, environ ...string) *Runner {
	env := []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(toolVariables, name) {
			env = append(env, kv)
		}
	}
	return &Runner{exec: e, env: env, timeout: DefaultTimeout}
}

// WithTimeout returns a Runner whose commands are killed after d; 0 keeps
// only the caller's deadline.
func (r *Runner) WithTimeout(d time.Duration) *Runner {
	c := *r
	c.timeout = d
	return &c
}

// Error is returned when a command exits unsuccessfully; it keeps the exit
// status and stderr so callers can tell "not found" from real failures.
type Error struct {
	Command  string
	ExitCode int
	Stderr   string
	Err      error
}

func (e *Error) Error() string {
	msg := strings.TrimSpace(e.Stderr)
	if msg == "" || errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
		msg = strings.TrimSpace(e.Err.Error() + " " + msg)
	}
	return fmt.Sprintf("%s: exit %d: %s", e.Command, e.ExitCode, msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Run executes name with args and returns its stdout.
func (r *Runner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.RunWithInput(ctx, nil, name, args...)
}

// RunWithInput is Run with stdin fed from input.
func (r *Runner) RunWithInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	start := time.Now()
	cmd := r.exec.CommandContext(ctx, name, args...)
	cmd.SetEnv(r.env)
	var stdout, stderr bytes.Buffer
	cmd.SetStdout(&stdout)
	cmd.SetStderr(&stderr)
	if input != nil {
		cmd.SetStdin(bytes.NewReader(input))
	}
	klog.V(4).InfoS("Running command", "command", name, "args", args)
	if err := cmd.Run(); err != nil {
		cmdErr := &Error{Command: name + " " + strings.Join(args, " "), Stderr: stderr.String(), Err: err, ExitCode: -1}
		var exitErr exec.ExitError
		if errors.As(err, &exitErr) {
			cmdErr.ExitCode = exitErr.ExitStatus()
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			// Killed for its deadline (the caller's or the runner's): say so,
			// so that callers and the CSI boundary see DeadlineExceeded.
			cmdErr.Err = fmt.Errorf("%w after %v (%v)", ctxErr, time.Since(start).Round(time.Millisecond), err)
		}
		return stdout.Bytes(), cmdErr
	}
	return stdout.Bytes(), nil
}
