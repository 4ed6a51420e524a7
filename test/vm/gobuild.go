package vm

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// GoBuild is one static build of Go packages for the guest or for an image:
// linux/amd64 with cgo off, as neither has a libc to match the host's, and
// -trimpath. The kernel suite, make demo, make bench and the e2e's images
// all build through it.
type GoBuild struct {
	// Packages are import paths, or paths relative to Dir ("./cmd/x").
	Packages []string
	// Out is the binary, or a directory ending in "/" that receives one
	// binary per package.
	Out string
	// Dir is where go runs; empty is the current directory.
	Dir string
	// LDFlags is go build's -ldflags, if any.
	LDFlags string
	// Test builds the package's test binary (go test -c).
	Test bool
	// Arch is the GOARCH; empty is amd64, the guest's.
	Arch string
}

// Run builds; the error carries the compiler's output. "go" is looked up on
// PATH, where go test and go run put their own toolchain.
func (b GoBuild) Run(ctx context.Context) error {
	args := []string{"build"}
	if b.Test {
		args = []string{"test", "-c"}
	}
	args = append(args, "-trimpath", "-o", b.Out)
	if b.LDFlags != "" {
		args = append(args, "-ldflags="+b.LDFlags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, b.Packages...)...)
	cmd.Dir = b.Dir
	arch := cmp.Or(b.Arch, "amd64")
	cmd.Env = append(os.Environ(), "LC_ALL=C", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("GOARCH=%s go %s: %w\n%s", arch, strings.Join(cmd.Args[1:], " "), err, out)
	}
	return nil
}
