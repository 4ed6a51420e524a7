package dm

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
)

// testdata/cache-superblock-restored.bin is the first block of metadata
// written by cache_restore (thin-provisioning-tools 0.9, metadata format
// 2), which sets the clean-shutdown flag.
func restoredSuperblock(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/cache-superblock-restored.bin")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withFlags rewrites the flags and the checksum, as the kernel's commit does.
func withFlags(b []byte, flags uint32) []byte {
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(c[4:8], flags)
	binary.LittleEndian.PutUint32(c[0:4], cacheSuperblockChecksum(c))
	return c
}

func TestParseCacheSuperblockOfCacheRestore(t *testing.T) {
	sb, err := ParseCacheSuperblock(restoredSuperblock(t))
	if err != nil {
		t.Fatal(err)
	}
	if !sb.CleanShutdown || sb.NeedsCheck || sb.Version != 2 {
		t.Fatalf("got %+v, want a clean shutdown of format 2 without needs_check", sb)
	}
}

func TestParseCacheSuperblockFlags(t *testing.T) {
	b := restoredSuperblock(t)
	for flags, want := range map[uint32]CacheSuperblock{
		0: {Version: 2},
		1: {CleanShutdown: true, Version: 2},
		2: {NeedsCheck: true, Version: 2},
		3: {CleanShutdown: true, NeedsCheck: true, Version: 2},
	} {
		got, err := ParseCacheSuperblock(withFlags(b, flags))
		if err != nil || got != want {
			t.Errorf("flags %d: got %+v, %v; want %+v", flags, got, err, want)
		}
	}
}

func TestParseCacheSuperblockRefuses(t *testing.T) {
	b := restoredSuperblock(t)
	torn := append([]byte(nil), b...)
	torn[100] ^= 0xff
	zero := make([]byte, CacheSuperblockBytes)
	for name, tc := range map[string]struct {
		block []byte
		want  string
	}{
		"a block changed after its checksum": {torn, "checksum"},
		"zeroed metadata":                    {zero, "magic 0"},
		"a short read":                       {b[:512], "512 bytes"},
	} {
		if _, err := ParseCacheSuperblock(tc.block); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, tc.want)
		}
	}
}
