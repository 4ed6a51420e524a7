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
	dir  string
	env  []string  // complete environment; toolEnv() when nil
	log  io.Writer // receives stdout and stderr besides the error tail; may be nil
}

// run executes c through e. On failure the error carries the command line
// and the last lines of its output, so a failed debootstrap or go build can
// be diagnosed from the test log alone.
func run(ctx context.Context, e exec.Interface, c command) error {
	cmd := e.CommandContext(ctx, c.name, c.args...)
	env := c.env
	if env == nil {
		env = toolEnv()
	}
	cmd.SetEnv(env)
	if c.dir != "" {
		cmd.SetDir(c.dir)
	}
	var tail tailBuffer
	var out io.Writer = &tail
	if c.log != nil {
		out = io.MultiWriter(&tail, c.log)
	}
	cmd.SetStdout(out)
	cmd.SetStderr(out)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", c.name, strings.Join(c.args, " "), err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last tailBytes written to it.
type tailBuffer struct{ buf bytes.Buffer }

const tailBytes = 4096

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if extra := t.buf.Len() - tailBytes; extra > 0 {
		t.buf.Next(extra)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return t.buf.String() }
