package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ssdcache/ssdcache/pkg/command"
)

// FioRunner runs fio with the given arguments and returns its stdout.
type FioRunner interface {
	Run(ctx context.Context, args []string) ([]byte, error)
}

// CommandFioRunner runs the fio binary through the shared command runner
// (injected exec, LC_ALL=C, stderr kept in errors).
type CommandFioRunner struct {
	Runner *command.Runner
	Binary string // "fio" when empty
}

// Run executes fio.
func (r CommandFioRunner) Run(ctx context.Context, args []string) ([]byte, error) {
	binary := r.Binary
	if binary == "" {
		binary = "fio"
	}
	return r.Runner.Run(ctx, binary, args...)
}

// fioJobSpec describes one fio invocation of the plan.
type fioJobSpec struct {
	Path     string
	Offset   int64
	Size     int64
	Test     Test
	ReadOnly bool
	Runtime  time.Duration
	IOLimit  int64
	RandSeed uint64
	// Distribution is fio's random_distribution ("": uniform).
	Distribution string
	// IOLog is where fio logs every I/O (write_iolog; "": no log).
	IOLog string
}

// args builds fio's command line. Every job is O_DIRECT through libaio with a
// fixed seed, so each run of a random test touches the same blocks in the same
// order.
func (j fioJobSpec) args() []string {
	a := []string{
		"--name=" + j.Test.ID,
		"--filename=" + escapeFioFilename(j.Path),
		fmt.Sprintf("--offset=%d", j.Offset),
		fmt.Sprintf("--size=%d", j.Size),
		"--rw=" + j.Test.FioRW(),
		fmt.Sprintf("--bs=%d", j.Test.BlockSize),
		fmt.Sprintf("--iodepth=%d", j.Test.QueueDepth),
		"--numjobs=1",
		"--ioengine=libaio",
		"--direct=1",
		fmt.Sprintf("--randseed=%d", j.RandSeed),
		"--randrepeat=1",
		"--percentile_list=50:99",
		"--output-format=json",
	}
	if j.ReadOnly {
		a = append(a, "--readonly", "--allow_file_create=0")
	}
	if j.Runtime > 0 {
		a = append(a, fmt.Sprintf("--runtime=%d", int64(math.Ceil(j.Runtime.Seconds()))))
	}
	if j.IOLimit > 0 {
		a = append(a, fmt.Sprintf("--io_size=%d", j.IOLimit))
	}
	if j.Distribution != "" {
		a = append(a, "--random_distribution="+j.Distribution)
	}
	if j.IOLog != "" {
		a = append(a, "--write_iolog="+escapeFioFilename(j.IOLog))
	}
	return a
}

// escapeFioFilename escapes ':', which fio treats as a list separator in
// filename= (stable /dev/disk/by-id and by-path names contain it).
func escapeFioFilename(p string) string {
	return strings.ReplaceAll(p, ":", `\:`)
}
