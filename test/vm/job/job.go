// Package job is the host side the demo and the bench share: Job builds
// static binaries into the VM's share dir, boots the VM on the guest program
// while echoing the guest's output as it comes, and brings the results back;
// Main is both programs' main() around it.
package job

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/test/vm"
)

// follow copies what the guest appends to its stdout file, every second
// and once more when qemu has exited.
func follow(b *vm.Boot, w io.Writer) {
	var offset int64
	for done := false; !done; {
		select {
		case <-b.Done():
			done = true
		case <-time.After(time.Second):
		}
		if f, err := os.Open(b.StdoutPath()); err == nil {
			n, _ := io.Copy(w, io.NewSectionReader(f, offset, math.MaxInt64-offset))
			offset += n
			f.Close()
		}
	}
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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
