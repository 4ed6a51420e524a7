package dm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CacheSuperblock is what the node reads of a dm-cache metadata device's
// superblock (struct cache_disk_superblock, drivers/md/dm-cache-metadata.c).
type CacheSuperblock struct {
	// CleanShutdown is dm-cache's CLEAN_SHUTDOWN flag. The kernel sets it
	// with the commit of every suspend, and so of a table's removal, and
	// clears it when a table opens the metadata (a load over metadata no
	// live table shares) and with every later commit that carries a change.
	// A suspend and resume of the same table leaves it set until the
	// cache's next change.
	CleanShutdown bool
	// NeedsCheck is dm-cache's NEEDS_CHECK flag: the kernel met an error
	// and the metadata must be checked with cache_check before use.
	NeedsCheck bool
	// Version is the metadata format (1 or 2).
	Version uint32
}

const (
	// CacheSuperblockBytes is the metadata block that holds the superblock.
	CacheSuperblockBytes   = 4096
	cacheSuperblockMagic   = 06142003
	cacheSuperblockCsumXor = 9031977
	flagCleanShutdown      = 1 << 0
	flagNeedsCheck         = 1 << 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ParseCacheSuperblock decodes the first metadata block of a dm-cache
// metadata device after checking its magic number and checksum, as the
// kernel's superblock validator does.
func ParseCacheSuperblock(b []byte) (CacheSuperblock, error) {
	if len(b) < CacheSuperblockBytes {
		return CacheSuperblock{}, fmt.Errorf("dm-cache superblock: %d bytes, want %d", len(b), CacheSuperblockBytes)
	}
	if magic := binary.LittleEndian.Uint64(b[32:40]); magic != cacheSuperblockMagic {
		return CacheSuperblock{}, fmt.Errorf("not dm-cache metadata: magic %d, want %d", magic, cacheSuperblockMagic)
	}
	if got, want := cacheSuperblockChecksum(b), binary.LittleEndian.Uint32(b[0:4]); got != want {
		return CacheSuperblock{}, fmt.Errorf("dm-cache superblock: checksum %#x, the block says %#x", got, want)
	}
	flags := binary.LittleEndian.Uint32(b[4:8])
	return CacheSuperblock{
		CleanShutdown: flags&flagCleanShutdown != 0,
		NeedsCheck:    flags&flagNeedsCheck != 0,
		Version:       binary.LittleEndian.Uint32(b[40:44]),
	}, nil
}

// cacheSuperblockChecksum is dm_bm_checksum over the block past its
// checksum field: crc32c seeded with ~0, without the final inversion that
// Go's crc32 applies, xored with the superblock's constant.
func cacheSuperblockChecksum(b []byte) uint32 {
	return ^crc32.Checksum(b[4:CacheSuperblockBytes], castagnoli) ^ cacheSuperblockCsumXor
}

// Superblock reads the superblock of the metadata device at path with
// direct I/O: a live table's metadata is written through dm-bufio, past
// the page cache, so a buffered read could return an older block.
func (c *CacheTools) Superblock(_ context.Context, path string) (CacheSuperblock, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return CacheSuperblock{}, err
	}
	defer f.Close()
	raw := make([]byte, 2*CacheSuperblockBytes)
	off := (CacheSuperblockBytes - int(uintptr(unsafe.Pointer(&raw[0]))%CacheSuperblockBytes)) % CacheSuperblockBytes
	block := raw[off : off+CacheSuperblockBytes]
	if _, err := f.ReadAt(block, 0); err != nil {
		return CacheSuperblock{}, fmt.Errorf("read the superblock of %s: %w", path, err)
	}
	sb, err := ParseCacheSuperblock(block)
	if err != nil {
		return CacheSuperblock{}, fmt.Errorf("%s: %w", path, err)
	}
	return sb, nil
}
