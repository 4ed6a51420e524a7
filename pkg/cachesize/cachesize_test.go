package cachesize

import (
	"math"
	"testing"
)

func TestBlockSectorsFor(t *testing.T) {
	cases := []struct {
		dataBytes uint64
		want      uint64
	}{
		{1 << 30, 512},    // 1 GiB: 4,096 blocks of 256 KiB
		{240 << 30, 512},  // 240 GiB: 983,040 blocks, still 256 KiB
		{256 << 30, 1024}, // 256 GiB: 1,048,576 blocks would be too many
		{1 << 40, 4096},   // 1 TiB: 2 MiB blocks
		{1 << 60, MaxBlockSectors},
	}
	for _, c := range cases {
		got := BlockSectorsFor(c.dataBytes, DefaultBlockSectors)
		if got != c.want {
			t.Errorf("BlockSectorsFor(%d) = %d, want %d", c.dataBytes, got, c.want)
		}
		if err := ValidateBlockSectors(got); err != nil {
			t.Errorf("BlockSectorsFor(%d) = %d is invalid: %v", c.dataBytes, got, err)
		}
		if c.dataBytes < 1<<50 && c.dataBytes/(got*SectorSize) > MaxCacheBlocks {
			t.Errorf("BlockSectorsFor(%d) = %d leaves more than %d blocks", c.dataBytes, got, MaxCacheBlocks)
		}
	}
}

// A node's other block (--cache-block-size=64Ki, lvm2's) doubles only once
// a million of them would not fit.
func TestBlockSectorsForAnotherMinimum(t *testing.T) {
	if got := BlockSectorsFor(60<<30, 128); got != 128 {
		t.Errorf("60 GiB from 64 KiB: %d sectors, want 128", got)
	}
	if got := BlockSectorsFor(64<<30, 128); got != 256 {
		t.Errorf("64 GiB from 64 KiB: %d sectors, want 256 (a million blocks of 64 KiB would be too many)", got)
	}
}

// LVM takes sizes in sectors: 48 MiB of 256 KiB blocks is 4 MiB + 192 x 44
// bytes, 8,448 bytes over 4 MiB, which lvcreate refused until it was rounded up.
func TestMetadataBytesAreWholeSectors(t *testing.T) {
	for _, data := range []uint64{48 << 20, 20 << 20, 1 << 30, 3<<30 + 4<<20} {
		for _, block := range []uint64{64, 128, 512, 2048} {
			got := MetadataBytesFor(data, block)
			exact := uint64(metadataBaseBytes) + data/(block*SectorSize)*metadataBytesPerBlock
			if got%SectorSize != 0 || got < exact || got >= exact+SectorSize {
				t.Errorf("MetadataBytesFor(%d, %d) = %d, want %d rounded up to a sector", data, block, got, exact)
			}
		}
	}
}

func TestMetadataBytesFor(t *testing.T) {
	// 1 GiB of 64 KiB blocks: 4 MiB + 16,384 x 44 bytes.
	if got, want := MetadataBytesFor(1<<30, 128), uint64(4<<20+16384*44); got != want {
		t.Fatalf("MetadataBytesFor(1GiB) = %d, want %d", got, want)
	}
	if got := MetadataBytesFor(1<<62, 128); got != MaxMetadataBytes {
		t.Fatalf("huge cache metadata = %d, want the %d cap", got, uint64(MaxMetadataBytes))
	}
}

func TestValidateBlockSectors(t *testing.T) {
	for _, ok := range []uint64{64, 128, 512, MaxBlockSectors} {
		if err := ValidateBlockSectors(ok); err != nil {
			t.Errorf("%d: %v", ok, err)
		}
	}
	for _, bad := range []uint64{0, 32, 65, MaxBlockSectors + 64} {
		if err := ValidateBlockSectors(bad); err == nil {
			t.Errorf("%d accepted", bad)
		}
	}
}

// What lvcreate allocates for the two LVs of an attached cache: each
// rounded up to whole extents. The metadata LV of even the smallest cache
// is 4 MiB and a few bytes, so two extents of 4 MiB. The footprint adds a
// second metadata LV, which a promotion writes beside the live one.
func TestFootprint(t *testing.T) {
	const mi = 1 << 20
	cases := []struct {
		name                                string
		data, extent, block, attached, want uint64
	}{
		{"smallest cache", 16 * mi, 4 * mi, DefaultBlockSectors, 16*mi + 8*mi, 16*mi + 16*mi},
		{"1 GiB", 1 << 30, 4 * mi, DefaultBlockSectors, 1<<30 + 8*mi, 1<<30 + 16*mi},
		{"data not a whole extent", 10*mi + 1, 4 * mi, DefaultBlockSectors, 12*mi + 8*mi, 12*mi + 16*mi},
		{"large extents", 16 * mi, 32 * mi, DefaultBlockSectors, 64 * mi, 96 * mi},
		// 240 GiB from 64 KiB blocks doubles twice, to 983,040 blocks of 256 KiB:
		// 4 MiB + 43,253,760 bytes of metadata, 12 extents.
		{"doubled blocks", 240 << 30, 4 * mi, 128, 240<<30 + 48*mi, 240<<30 + 96*mi},
		{"no extent size: the bytes asked for", 16 * mi, 0, DefaultBlockSectors, 16*mi + 4*mi + 3072, 16*mi + 8*mi + 6144},
		{"saturates", math.MaxUint64 - 1, 4 * mi, DefaultBlockSectors, math.MaxUint64, math.MaxUint64},
	}
	for _, c := range cases {
		if got := AttachedBytes(c.data, c.extent, c.block); got != c.attached {
			t.Errorf("%s: AttachedBytes(%d, %d, %d) = %d, want %d", c.name, c.data, c.extent, c.block, got, c.attached)
		}
		if got := Footprint(c.data, c.extent, c.block); got != c.want {
			t.Errorf("%s: Footprint(%d, %d, %d) = %d, want %d", c.name, c.data, c.extent, c.block, got, c.want)
		}
	}
}

// The largest cache a pool takes leaves room for its two metadata LVs, in
// whole extents; it is what the controller tells a binding too large for its node.
func TestMaxDataBytes(t *testing.T) {
	const mi = 1 << 20
	cases := []struct {
		name                      string
		pool, extent, block, want uint64
	}{
		{"1 GiB of 4 MiB extents", 1 << 30, 4 * mi, DefaultBlockSectors, 1<<30 - 16*mi},
		{"no room for the metadata", 8 * mi, 4 * mi, DefaultBlockSectors, 0},
		{"one extent of data", 20 * mi, 4 * mi, DefaultBlockSectors, 4 * mi},
		{"empty pool", 0, 4 * mi, DefaultBlockSectors, 0},
		{"huge pool", math.MaxInt64, 4 * mi, DefaultBlockSectors, math.MaxInt64 + 1 - 32<<30 - 4*mi},
	}
	for _, c := range cases {
		got := MaxDataBytes(c.pool, c.extent, c.block)
		if got != c.want {
			t.Errorf("%s: MaxDataBytes(%d, %d, %d) = %d, want %d", c.name, c.pool, c.extent, c.block, got, c.want)
		}
		if got > 0 && Footprint(got, c.extent, c.block) > c.pool {
			t.Errorf("%s: a cache of %d bytes takes %d, more than the pool's %d", c.name, got, Footprint(got, c.extent, c.block), c.pool)
		}
	}
}
