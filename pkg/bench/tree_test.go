package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPlanTreeIsFixedBySizeAndSeed(t *testing.T) {
	const total = 128 << 20
	plan := PlanTree(total, 7)
	var sum int64
	for _, f := range plan {
		if f.Size < 1 || f.Size > maxTreeFile {
			t.Fatalf("%s has %d bytes; allowed 1..%d", f.Path, f.Size, maxTreeFile)
		}
		sum += f.Size
	}
	if sum != total {
		t.Errorf("files hold %d bytes, want exactly %d", sum, total)
	}
	if n := len(plan); n < 1000 || n > 3000 {
		t.Errorf("%d files in 128 MiB; want a few thousand", n)
	}
	if !slices.Equal(plan, PlanTree(total, 7)) {
		t.Error("the same size and seed gave another tree")
	}
	if slices.Equal(plan, PlanTree(total, 8)) {
		t.Error("another seed gave the same tree")
	}
	if !slices.IsSortedFunc(plan, func(a, b TreeFile) int { return strings.Compare(a.Path, b.Path) }) {
		t.Error("the plan is not in path order, so the read order would not be the layout order")
	}
}

func TestOSTreeFSWritesAndReadsEveryByte(t *testing.T) {
	root := filepath.Join(t.TempDir(), "tree")
	plan := PlanTree(3<<20, 1)
	var fs OSTreeFS
	ctx := context.Background()
	if err := fs.Write(ctx, root, plan, plan); err != nil {
		t.Fatal(err)
	}
	m, err := fs.Read(ctx, root, plan, 1<<20)
	if errors.Is(err, ErrNoDirectIO) {
		t.Skipf("%s: %v", root, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if m.IOBytes != 3<<20 || m.Files != len(plan) || m.MBps <= 0 || m.LatP99us < m.LatP50us {
		t.Errorf("read %+v; want every byte of %d files once", m, len(plan))
	}
	first, _ := os.ReadFile(filepath.Join(root, plan[0].Path))
	second, _ := os.ReadFile(filepath.Join(root, plan[1].Path))
	if n := min(len(first), len(second), 4096); bytes.Equal(first[:n], second[:n]) {
		t.Errorf("%s and %s begin with the same bytes; every file needs content of its own", plan[0].Path, plan[1].Path)
	}

	// A completed layout is known by its marker, without a look at the files.
	if err := os.Truncate(filepath.Join(root, plan[2].Path), 1); err != nil {
		t.Fatal(err)
	}
	if missing, err := fs.Missing(root, plan); err != nil || len(missing) != 0 {
		t.Errorf("with the layout marker: missing %v, err %v; want none, no file looked at", missing, err)
	}
	if _, err := fs.Read(ctx, root, plan, 1<<20); err == nil || !strings.Contains(err.Error(), "the tree changed after its layout") {
		t.Errorf("reading a tree changed after its layout: err = %v", err)
	}
	if err := os.Remove(filepath.Join(root, layoutMarker)); err != nil {
		t.Fatal(err)
	}
	if missing, _ := fs.Missing(root, plan); len(missing) != 1 || missing[0] != plan[2] {
		t.Errorf("without the marker, after truncating %s: missing %v", plan[2].Path, missing)
	}
}

// fakeTree records layouts and answers each target's reads with its next
// time in ms (runtimes, keyed by the target directory).
type fakeTree struct {
	written  map[string]int // root -> files written
	reads    []string
	runtimes map[string][]int64
}

func (f *fakeTree) Missing(root string, plan []TreeFile) ([]TreeFile, error) {
	if f.written[root] > 0 {
		return nil, nil
	}
	return plan, nil
}

func (f *fakeTree) Write(_ context.Context, root string, _, missing []TreeFile) error {
	f.written[root] += len(missing)
	return nil
}

func (f *fakeTree) Read(_ context.Context, root string, plan []TreeFile, _ int64) (Measurement, error) {
	f.reads = append(f.reads, root)
	dir := filepath.Dir(root)
	ms := f.runtimes[dir][0]
	f.runtimes[dir] = append(f.runtimes[dir][1:], ms)
	return Measurement{MBps: 100, IOPS: 10, IOBytes: 1 << 20, RuntimeMs: ms, Files: len(plan)}, nil
}

func treeConfig(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.Targets = []Target{{Name: "raw-ssd", Path: "/mnt/ssd"}, {Name: "raw-hdd", Path: "/mnt/hdd"}, {Name: "ssdcache", Path: "/mnt/vol", DMDevice: "ssdcache-pvc-1"}}
	cfg.Tests, cfg.PlotTest = []Test{TreeTest}, TreeTest.ID
	return cfg
}

func treeHarness() (*harness, *fakeTree) {
	h := newHarness()
	tree := &fakeTree{written: map[string]int{}, runtimes: map[string][]int64{
		"/mnt/ssd": {1000, 1200, 1100}, "/mnt/hdd": {8000, 5000, 5000}, "/mnt/vol": {10000, 3000, 1650}}}
	h.deps.Tree = tree
	h.deps.Inspector = fakeInspector{"/mnt/ssd": {Kind: KindDir}, "/mnt/hdd": {Kind: KindDir}, "/mnt/vol": {Kind: KindDir},
		"/dev/ssd": {Kind: KindBlock, Size: 1 << 30}, "/dev/shm": {Kind: KindDir, MemoryFS: "tmpfs"}}
	return h, tree
}

func TestTreeRunLaysOutOnceAndReadsEveryRun(t *testing.T) {
	h, tree := treeHarness()
	cfg := treeConfig(t)
	b, err := New(cfg, h.deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := b.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.written) != len(cfg.Targets)*len(cfg.WorkingSets) || len(r.Prefilled) != 0 {
		t.Errorf("layouts %v, Run prefilled %v; want one tree per target and working set, laid out by Prepare only", tree.written, r.Prefilled)
	}
	if want := len(cfg.Targets) * len(cfg.WorkingSets) * cfg.Runs; len(tree.reads) != want || h.fio.callsNamed(TreeTest.ID) != 0 {
		t.Errorf("%d tree reads, %d fio calls; want %d reads, no fio", len(tree.reads), h.fio.callsNamed(TreeTest.ID), want)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	// The last run over raw SSD's median run (1.65/1.1), run 1 over raw
	// HDD's run 1, not its median (10/8).
	if want := "| ssdcache | 117 | 10.00 s | 3.00 s | 1.65 s | 1.50 | 1.25 |"; !strings.Contains(md.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, md.String())
	}
}

func TestTreeRefusesWhatItCannotRun(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"beside block tests": {func(c *Config) { c.Tests = append(Matrix()[:1], TreeTest) }, "runs alone"},
		"on a block device":  {func(c *Config) { c.Targets[0].Path = "/dev/ssd" }, "raw-ssd: /dev/ssd is block; the test tree-read needs a directory"},
		"missing, read-only": {func(c *Config) { c.ReadOnly = true }, "read-only mode needs the tree laid out"},
		"in memory":          {func(c *Config) { c.Targets[1].Path = "/dev/shm" }, "raw-hdd: /dev/shm is on tmpfs"},
		"block test on a dir": {func(c *Config) { c.Tests, c.PlotTest = Matrix()[:1], Matrix()[0].ID },
			"/mnt/ssd is a directory; directories are read by the test tree-read alone"},
	} {
		t.Run(name, func(t *testing.T) {
			h, _ := treeHarness()
			cfg := treeConfig(t)
			tc.edit(&cfg)
			b, err := New(cfg, h.deps)
			if err == nil {
				_, err = b.Run(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestOSInspectorTellsMemoryFilesystems(t *testing.T) {
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil || !strings.Contains(string(mounts), " /dev/shm tmpfs ") {
		t.Skip("no tmpfs at /dev/shm here")
	}
	for dir, want := range map[string]string{"/dev/shm": "tmpfs", t.TempDir(): ""} {
		info, err := OSInspector{}.Inspect(dir)
		if err != nil || info.Kind != KindDir || (info.MemoryFS == "tmpfs") != (want == "tmpfs") {
			t.Errorf("Inspect(%s) = %+v, %v; want a directory, memory filesystem %q", dir, info, err, want)
		}
	}
}
