package guest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Run runs a system tool with LC_ALL=C and returns its trimmed stdout; the
// error carries stderr.
func Run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// partition writes a GPT on disk (a /dev/disk/by-id path) with one
// partition per size in MiB, in order from the start of the disk, unless an
// earlier boot wrote it (afterReboot), and returns their by-id paths
// (disk + "-partN") once udev has made them.
func partition(ctx context.Context, disk string, sizesMiB []int64, afterReboot bool) ([]string, error) {
	if !afterReboot {
		var script strings.Builder
		script.WriteString("label: gpt\n")
		for _, s := range sizesMiB {
			fmt.Fprintf(&script, "size=%dMiB\n", s)
		}
		cmd := exec.CommandContext(ctx, "sfdisk", "--quiet", "--wipe", "always", disk)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.Stdin = strings.NewReader(script.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("sfdisk %s: %w: %s", disk, err, out)
		}
	}
	if _, err := Run(ctx, "udevadm", "settle"); err != nil {
		return nil, err
	}
	parts := make([]string, len(sizesMiB))
	for i := range sizesMiB {
		parts[i] = fmt.Sprintf("%s-part%d", disk, i+1)
		if err := WaitForPath(ctx, parts[i], 30*time.Second); err != nil {
			return nil, err
		}
	}
	return parts, nil
}

// WaitForPath waits until path exists (a udev link, a sysfs entry).
func WaitForPath(ctx context.Context, path string, timeout time.Duration) error {
	return Poll(ctx, path+" to appear", timeout, 100*time.Millisecond, func() (bool, string, error) {
		_, err := os.Stat(path)
		return err == nil, "", nil
	})
}

// Poll calls check every interval until it reports done or an error (what
// it awaits can no longer come), or timeout passes; check also says what it
// saw, which the error then quotes.
func Poll(ctx context.Context, what string, timeout, interval time.Duration, check func() (done bool, saw string, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, saw, err := check()
		switch {
		case err != nil:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case done:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%s: not within %v (by %s); last seen: %s", what, timeout.Round(time.Second), deadline.Format(time.TimeOnly), saw)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
