package blockdev

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// copyFiles writes data to a source file and dstLen zero bytes to a
// destination file, copies extents between them and returns both paths and
// what the destination holds; it skips the test where O_DIRECT is refused.
func copyFiles(t *testing.T, data []byte, dstLen int, extents []Extent) (src, dst string, got []byte, err error) {
	t.Helper()
	dir := t.TempDir()
	src, dst = filepath.Join(dir, "origin"), filepath.Join(dir, "cache")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, make([]byte, dstLen), 0o600); err != nil {
		t.Fatal(err)
	}
	err = copyExtents(context.Background(), src, dm.DevNum{}, dst, dm.DevNum{}, extents)
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("%s does not take O_DIRECT: %v", dir, err)
	}
	got, _ = os.ReadFile(dst)
	return src, dst, got, err
}

// Regular files stand for the devices: their device number is 0:0.
func TestCopyExtentsCopiesEachRange(t *testing.T) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i / 4096)
	}
	extents := []Extent{{Src: 8 << 10, Dst: 0, Length: 8 << 10}, {Src: 40 << 10, Dst: 16 << 10, Length: 4 << 10}}
	src, dst, got, err := copyFiles(t, data, 32<<10, extents)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 32<<10)
	copy(want[0:], data[8<<10:16<<10])
	copy(want[16<<10:], data[40<<10:44<<10])
	if !bytes.Equal(got, want) {
		t.Fatal("the cache file does not hold the copied ranges where they belong")
	}
	if err := copyExtents(context.Background(), src, dm.DevNum{}, dst, dm.DevNum{Major: 8, Minor: 1}, extents); err == nil {
		t.Fatal("copied onto a path that is not the expected device")
	}
	if err := copyExtents(context.Background(), src, dm.DevNum{Major: 8, Minor: 1}, dst, dm.DevNum{}, extents); err == nil {
		t.Fatal("copied from a path that is not the expected device")
	}
	if err := copyExtents(context.Background(), src, dm.DevNum{}, dst, dm.DevNum{}, []Extent{{Src: 1, Length: 4096}}); err == nil {
		t.Fatal("copied an unaligned extent")
	}
}

// Extents of several chunks are read and written at once, chunk by chunk,
// each to its place; a cancelled copy says so instead of stopping short.
func TestCopyExtentsPipelinesChunks(t *testing.T) {
	data := make([]byte, 3*copyChunk+64<<10)
	for i := range data {
		data[i] = byte(i/4096 + i/copyChunk)
	}
	// 2.5 chunks moved up by 8 KiB, then 8 KiB of the last chunk to the start.
	extents := []Extent{{Src: 0, Dst: 8 << 10, Length: 2*copyChunk + copyChunk/2}, {Src: 3 * copyChunk, Dst: 0, Length: 8 << 10}}
	src, dst, got, err := copyFiles(t, data, len(data), extents)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(data))
	copy(want[8<<10:], data[:2*copyChunk+copyChunk/2])
	copy(want[0:], data[3*copyChunk:3*copyChunk+8<<10])
	if !bytes.Equal(got, want) {
		t.Fatal("the cache file does not hold the copied chunks where they belong")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := copyExtents(ctx, src, dm.DevNum{}, dst, dm.DevNum{}, extents); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled copy returned %v, want context.Canceled", err)
	}
}
