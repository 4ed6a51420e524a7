// Package job is the host side the demo and the bench share: Job builds
// static binaries into the VM's share dir, boots the VM on the guest program
// while echoing the guest's output as it comes, and brings the results back;
// Main is both programs' main() around it.
package job

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

// run boots v on script and copies the guest's output (stdout and stderr of
// the script, which should merge them) to progress while it runs. It fails
// when the harness failed, the script did not finish or exited non-zero;
// the result is returned in every case it exists.
func run(ctx context.Context, v *vm.VM, script string, progress io.Writer) (*vm.Result, error) {
	b, err := v.Start(ctx, script)
	if err != nil {
		return nil, err
	}
	follow(b, progress)
	res, err := b.Wait()
	switch {
	case err != nil:
		return res, err
	case res.TimedOut:
		return res, fmt.Errorf("the VM timed out after %v; console tail:\n%s", res.Duration.Round(time.Second), Tail(res.Console, 30))
	case !res.Finished:
		return res, fmt.Errorf("the guest script did not finish (after %v); console tail:\n%s\nboot log:\n%s",
			res.Duration.Round(time.Second), Tail(res.Console, 30), res.BootLog)
	case res.ExitCode != 0:
		return res, fmt.Errorf("the guest program exited with code %d (see its output above)", res.ExitCode)
	}
	return res, nil
}

// follow copies what the guest appends to its stdout file until qemu exits.
func follow(b *vm.Boot, w io.Writer) {
	var offset int64
	poll := func() {
		f, err := os.Open(b.StdoutPath())
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return
		}
		n, _ := io.Copy(w, f)
		offset += n
	}
	for {
		select {
		case <-b.Done():
			poll()
			return
		case <-time.After(time.Second):
			poll()
		}
	}
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CopyFiles copies the named files from src to dst, creating dst.
func CopyFiles(src, dst string, names ...string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// prefixWriter prefixes each whole line of the guest's output, so it reads
// apart from the host's own messages; a partial line waits for its end.
type prefixWriter struct {
	w       io.Writer
	prefix  string
	pending []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.pending = append(p.pending, b...)
	for {
		i := bytes.IndexByte(p.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.pending[:i]); err != nil {
			return len(b), err
		}
		p.pending = p.pending[i+1:]
	}
}
