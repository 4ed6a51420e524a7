package nbd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// FileBackend stores the export in a sparse file.
type FileBackend struct {
	*os.File
}

// OpenFile opens (creating if needed) a sparse file of exactly size bytes.
// An existing file keeps its contents, so a second boot sees the same disk.
func OpenFile(path string, size int64) (*FileBackend, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nbd: opening backing file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("nbd: stat backing file: %w", err)
	}
	if st.Size() > size {
		f.Close()
		return nil, fmt.Errorf("nbd: backing file %s is %d bytes: larger than the export size %d; refusing to cut it", path, st.Size(), size)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("nbd: sizing backing file %s to %d: %w", path, size, err)
	}
	return &FileBackend{File: f}, nil
}

// PunchHole deallocates the range, keeping the file size.
func (b *FileBackend) PunchHole(offset, length int64) error {
	return unix.Fallocate(int(b.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, offset, length)
}
