package dm

import "testing"

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

// lvm2's own smallest block, 64 KiB, doubles at the same point as it does in lvm2.
func TestBlockSectorsForASmallerMinimum(t *testing.T) {
	if got := BlockSectorsFor(60<<30, 128); got != 128 {
		t.Errorf("60 GiB from 64 KiB: %d sectors, want 128", got)
	}
	if got := BlockSectorsFor(64<<30, 128); got != 256 {
		t.Errorf("64 GiB from 64 KiB: %d sectors, want 256 (a million blocks of 64 KiB would be too many)", got)
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
