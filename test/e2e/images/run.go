package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/utils/exec"
)

// toolEnv is the environment of the system tools the builder runs: a stable
// locale so their messages can be quoted in errors, and sbin on PATH because
// debootstrap and chroot live there.
func toolEnv() []string {
	return []string{"LC_ALL=C", defaultPath}
}

// command is one external command run by the builder.
type command struct {
	name string
	args []string
	env  []string  // complete environment; toolEnv() when nil
	log  io.Writer // receives stdout and stderr; may be nil
}

// run executes c through e. On failure the error carries the command line
// and the last 4 KiB of its output, so a failed debootstrap or tar can be
// diagnosed from the test log alone.
func run(ctx context.Context, e exec.Interface, c command) error {
	cmd := e.CommandContext(ctx, c.name, c.args...)
	if c.env == nil {
		c.env = toolEnv()
	}
	cmd.SetEnv(c.env)
	var out bytes.Buffer
	w := io.Writer(&out)
	if c.log != nil {
		w = io.MultiWriter(&out, c.log)
	}
	cmd.SetStdout(w)
	cmd.SetStderr(w)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", c.name, strings.Join(c.args, " "), err, out.Bytes()[max(0, out.Len()-4096):])
	}
	return nil
}
