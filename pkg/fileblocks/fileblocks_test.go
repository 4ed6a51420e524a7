package fileblocks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// fakeMount makes a directory look like the root of a filesystem mounted
// from the device that really holds it, through a mountinfo file of its own.
func fakeMount(t *testing.T) (*Host, string, dm.DevNum) {
	t.Helper()
	root := t.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	dev := dm.DevNum{Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev)}
	info := filepath.Join(t.TempDir(), "mountinfo")
	lines := fmt.Sprintf("21 1 %d:%d /some/dir /elsewhere rw - ext4 /dev/x rw\n22 1 %d:%d / %s rw - ext4 /dev/x rw\n", dev.Major, dev.Minor, dev.Major, dev.Minor, root)
	if err := os.WriteFile(info, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &Host{MountInfo: info}
	probe := filepath.Join(root, "probe")
	write(t, probe, 4096)
	if _, err := h.Map(context.Background(), dev, []string{"probe"}, all); err != nil {
		t.Skipf("the filesystem of %s does not map extents here: %v", root, err)
	}
	os.Remove(probe)
	return h, root, dev
}

func write(t *testing.T, name string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMapFindsTheDataOfFilesAndDirectoriesInsideTheFilesystemOnly(t *testing.T) {
	h, root, dev := fakeMount(t)
	write(t, filepath.Join(root, "model.bin"), 1<<20)
	write(t, filepath.Join(root, "index/a"), 256<<10)
	write(t, filepath.Join(root, "index/sub/b"), 128<<10)
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), 512<<10)
	// Links that would leave the filesystem if followed as the host sees them.
	for link, to := range map[string]string{"abs": filepath.Join(outside, "secret"), "up": "../../../../../../" + outside + "/secret", "index/out": outside} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	found, err := h.Map(context.Background(), dev, []string{"model.bin", "index", "abs", "up", "missing/file"}, all)
	if err != nil {
		t.Fatal(err)
	}
	if found.Files != 3 || found.Bytes != 1<<20+256<<10+128<<10 {
		t.Errorf("found %d files, %d bytes; want model.bin and index's two files, %d bytes", found.Files, found.Bytes, 1<<20+256<<10+128<<10)
	}
	if want := []string{"abs", "up", "missing/file"}; !slices.Equal(found.Missing, want) {
		t.Errorf("missing %q, want %q: links resolve inside the volume's root, where their targets do not exist", found.Missing, want)
	}
	if found.Truncated {
		t.Error("truncated without a limit")
	}
}

func TestMapStopsAtTheLimit(t *testing.T) {
	h, root, dev := fakeMount(t)
	write(t, filepath.Join(root, "a"), 1<<20)
	write(t, filepath.Join(root, "b"), 1<<20)
	var seen uint64
	found, err := h.Map(context.Background(), dev, []string{"a", "b"}, func(e Extent) bool {
		seen += e.Length
		return seen < 1536<<10
	})
	if err != nil {
		t.Fatal(err)
	}
	if found.Bytes != seen || seen < 1536<<10 || seen > 2<<20 || !found.Truncated {
		t.Errorf("mapped %d bytes (visited %d), truncated %v; want the walk stopped once the visitor saw 1536 KiB", found.Bytes, seen, found.Truncated)
	}
}

func TestMapRefusesPathsThatLeaveTheVolume(t *testing.T) {
	h, _, dev := fakeMount(t)
	for _, p := range []string{"", "/etc/passwd", "data/../../etc", ".."} {
		if _, err := h.Map(context.Background(), dev, []string{"ok", p}, all); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("path %q: err %v, want ErrInvalidPath", p, err)
		}
	}
}

func TestMapNeedsTheFilesystemMountedWhole(t *testing.T) {
	h, _, dev := fakeMount(t)
	other := dm.DevNum{Major: dev.Major, Minor: dev.Minor + 1000}
	if _, err := h.Map(context.Background(), other, []string{"a"}, all); !errors.Is(err, ErrNotMounted) {
		t.Errorf("unmounted device: err %v, want ErrNotMounted", err)
	}
}

// A device node is never opened: its driver's open() would run as the node
// agent (a tty without a terminal fails it with ENXIO, a watchdog arms).
func TestMapNeverOpensDeviceNodesOrFIFOs(t *testing.T) {
	h, root, dev := fakeMount(t)
	write(t, filepath.Join(root, "dir/data"), 64<<10)
	if err := unix.Mknod(filepath.Join(root, "dir/tty"), unix.S_IFCHR|0o600, int(unix.Mkdev(5, 0))); err != nil {
		t.Skipf("mknod: %v (needs root)", err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "dir/fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	found, err := h.Map(context.Background(), dev, []string{"dir/tty", "dir/fifo", "dir"}, all)
	if err != nil {
		t.Fatalf("map: %v; want the device node and the FIFO skipped, not opened", err)
	}
	if found.Files != 1 || found.Bytes != 64<<10 {
		t.Errorf("found %d files, %d bytes; want dir/data alone", found.Files, found.Bytes)
	}
}

func TestMapStopsAtADeepTree(t *testing.T) {
	h, root, dev := fakeMount(t)
	deep := filepath.Join(root, "top")
	for range maxDepth + 2 {
		deep = filepath.Join(deep, "d")
	}
	write(t, filepath.Join(deep, "f"), 4096)
	if _, err := h.Map(context.Background(), dev, []string{"top"}, all); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a tree %d levels deep: err %v, want ErrTooLarge", maxDepth+2, err)
	}
}

// all visits every extent.
func all(Extent) bool { return true }
