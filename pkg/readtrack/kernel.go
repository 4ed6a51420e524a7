package readtrack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// tracefsMounts are where tracefs is found; the first is where Kernel
// mounts it when neither is (a container's fresh /sys has no tracefs).
var tracefsMounts = [...]string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

const (
	tracepointGroup = "block"
	tracepointName  = "block_bio_remap"
)

// Kernel records misses with one BPF program per tracked device, on the
// block_bio_remap tracepoint. It needs CAP_BPF, CAP_PERFMON and, where
// tracefs is not mounted, CAP_SYS_ADMIN (the node plugin is privileged).
type Kernel struct {
	mu      sync.Mutex
	fields  *remapFields // read from tracefs at the first Track
	tracked map[string]*tracking
}

type tracking struct {
	volume Volume
	blocks *ebpf.Map
	prog   *ebpf.Program
	link   link.Link
}

// NewKernel returns a tracker that loads its programs into the running
// kernel.
func NewKernel() *Kernel { return &Kernel{tracked: map[string]*tracking{}} }

func (k *Kernel) Track(_ context.Context, name string, v Volume) error {
	if v.BlockSectors == 0 || v.BlockSectors > 1<<31-1 {
		return fmt.Errorf("track misses of %s: block size %d sectors is not between 1 and 2^31-1", name, v.BlockSectors)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.tracked[name]; ok {
		if t.volume == v {
			return nil
		}
		delete(k.tracked, name)
		t.close()
	}
	if k.fields == nil {
		f, err := loadRemapFields()
		if err != nil {
			return fmt.Errorf("track misses of %s: %w", name, err)
		}
		k.fields = f
	}
	t, err := attach(*k.fields, v)
	if err != nil {
		return fmt.Errorf("track misses of %s: %w", name, err)
	}
	k.tracked[name] = t
	return nil
}

func (k *Kernel) Take(_ context.Context, name string) ([]uint64, error) {
	k.mu.Lock()
	t, ok := k.tracked[name]
	k.mu.Unlock()
	if !ok {
		return nil, ErrNotTracked
	}
	var (
		block  uint64
		count  uint32
		blocks []uint64
	)
	it := t.blocks.Iterate()
	for it.Next(&block, &count) {
		blocks = append(blocks, block)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("missed reads of %s: %w", name, err)
	}
	// A block missed again between the look and its deletion was taken.
	if len(blocks) > 0 {
		if _, err := t.blocks.BatchDelete(blocks, nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("missed reads of %s: clear: %w", name, err)
		}
	}
	return blocks, nil
}

func (k *Kernel) Untrack(_ context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.tracked[name]; ok {
		delete(k.tracked, name)
		t.close()
	}
	return nil
}

// Close detaches every program.
func (k *Kernel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, t := range k.tracked {
		delete(k.tracked, name)
		t.close()
	}
}

func (t *tracking) close() {
	// The program stops before its map goes.
	_ = t.link.Close()
	_ = t.prog.Close()
	_ = t.blocks.Close()
}

func attach(f remapFields, v Volume) (*tracking, error) {
	blocks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "ssdcache_miss", Type: ebpf.Hash, KeySize: 8, ValueSize: 4,
		MaxEntries: MaxBlocksPerTake, Flags: unix.BPF_F_NO_PREALLOC,
	})
	if err != nil {
		return nil, fmt.Errorf("create the map of missed blocks: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "ssdcache_miss", Type: ebpf.TracePoint, License: "GPL",
		Instructions: missProgram(f, v, blocks.FD()),
	})
	if err != nil {
		blocks.Close()
		return nil, fmt.Errorf("load the miss-recording program: %w", err)
	}
	l, err := link.Tracepoint(tracepointGroup, tracepointName, prog, nil)
	if err != nil {
		prog.Close()
		blocks.Close()
		return nil, fmt.Errorf("attach to %s/%s: %w", tracepointGroup, tracepointName, err)
	}
	return &tracking{volume: v, blocks: blocks, prog: prog, link: l}, nil
}

// kernelDev is the kernel's internal dev_t of d (MKDEV), as tracepoints
// record it: major in the upper 12 bits, minor in the lower 20.
func kernelDev(major, minor uint32) int32 { return int32(major<<20 | minor&0xfffff) }

// missProgram records, in the map at mapFD, the origin block of every
// read that v.Device's table remaps to v.Origin.
func missProgram(f remapFields, v Volume, mapFD int) asm.Instructions {
	const (
		ctx   = asm.R6
		key   = -8  // the origin block, a u64 on the stack
		value = -16 // the map's u32 value
	)
	return asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(asm.R2, ctx, f.oldDev, asm.Word),
		asm.JNE.Imm(asm.R2, kernelDev(v.Device.Major, v.Device.Minor), "exit"),
		asm.LoadMem(asm.R2, ctx, f.dev, asm.Word),
		asm.JNE.Imm(asm.R2, kernelDev(v.Origin.Major, v.Origin.Minor), "exit"),
		// rwbs: "R..." is a read, "FR..." a read after a flush.
		asm.LoadMem(asm.R2, ctx, f.rwbs, asm.Byte),
		asm.JEq.Imm(asm.R2, 'R', "read"),
		asm.JNE.Imm(asm.R2, 'F', "exit"),
		asm.LoadMem(asm.R2, ctx, f.rwbs+1, asm.Byte),
		asm.JNE.Imm(asm.R2, 'R', "exit"),
		asm.LoadMem(asm.R2, ctx, f.sector, asm.DWord).WithSymbol("read"),
		asm.Div.Imm(asm.R2, int32(v.BlockSectors)),
		asm.StoreMem(asm.RFP, key, asm.R2, asm.DWord),
		asm.StoreImm(asm.RFP, value, 1, asm.Word),
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, value),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY; a full map drops the block until the next Take
		asm.FnMapUpdateElem.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

// loadRemapFields reads where block_bio_remap keeps its fields, mounting
// tracefs first when it is not.
func loadRemapFields() (*remapFields, error) {
	dir, err := tracefs()
	if err != nil {
		return nil, err
	}
	format, err := os.ReadFile(filepath.Join(dir, "events", tracepointGroup, tracepointName, "format"))
	if err != nil {
		return nil, err
	}
	return parseRemapFormat(string(format))
}

func tracefs() (string, error) {
	for _, dir := range tracefsMounts {
		if _, err := os.Stat(filepath.Join(dir, "events", tracepointGroup)); err == nil {
			return dir, nil
		}
	}
	if err := unix.Mount("tracefs", tracefsMounts[0], "tracefs", 0, ""); err != nil {
		return "", fmt.Errorf("tracefs is not mounted and mounting it on %s failed: %w", tracefsMounts[0], err)
	}
	return tracefsMounts[0], nil
}
