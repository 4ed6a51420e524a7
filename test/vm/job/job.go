// Package job is the host side the demo and the bench share: Job builds
// static binaries into the VM's share dir, boots the VM on the guest program
// while echoing the guest's output as it comes, and brings the results back;
// Main is both programs' main() around it.
package job

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

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
