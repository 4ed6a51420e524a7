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

	"k8s.io/klog/v2"
	"k8s.io/utils/exec"
)

// Runner runs external commands with a stable locale, so that their output can
// be parsed regardless of the node's language settings.
type Runner struct {
	exec exec.Interface
	env  []string
}

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
	return &Runner{exec: e, env: env}
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
	if msg == "" {
		msg = e.Err.Error()
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
		return stdout.Bytes(), cmdErr
	}
	return stdout.Bytes(), nil
}
