package dm

import "fmt"

// Cache block and metadata sizing, following lvm2's rules so that a cache
// made by ssdcache behaves like one made by lvmcache:
//   - blocks are 64 KiB unless that would exceed a million blocks, in which
//     case the block size doubles until it fits (large blocks waste SSD and
//     bandwidth on every promotion, so they are used only when necessary);
//   - metadata is 4 MiB plus 44 bytes a block, between 2 MiB and 16 GiB.
const (
	MinBlockSectors     = 64      // 32 KiB
	MaxBlockSectors     = 2097152 // 1 GiB
	DefaultBlockSectors = 128     // 64 KiB
	MaxCacheBlocks      = 1000000

	metadataBaseBytes     = 4 << 20
	metadataBytesPerBlock = 44
	MinMetadataBytes      = 2 << 20
	MaxMetadataBytes      = 16 << 30
)

// ValidateBlockSectors checks dm-cache's block size constraint.
func ValidateBlockSectors(sectors uint64) error {
	if sectors < MinBlockSectors || sectors > MaxBlockSectors || sectors%MinBlockSectors != 0 {
		return fmt.Errorf("cache block size %d sectors: must be a multiple of %d between %d and %d", sectors, MinBlockSectors, MinBlockSectors, MaxBlockSectors)
	}
	return nil
}

// BlockSectorsFor returns the cache block size for a cache data device of dataBytes.
func BlockSectorsFor(dataBytes uint64) uint64 {
	block := uint64(DefaultBlockSectors)
	for block < MaxBlockSectors && dataBytes/(block*SectorSize) > MaxCacheBlocks {
		block *= 2
	}
	return block
}

// MetadataBytesFor returns the metadata device size for a cache data device
// of dataBytes split into blocks of blockSectors.
func MetadataBytesFor(dataBytes, blockSectors uint64) uint64 {
	blocks := dataBytes / (blockSectors * SectorSize)
	size := uint64(metadataBaseBytes) + blocks*metadataBytesPerBlock
	return min(max(size, MinMetadataBytes), MaxMetadataBytes)
}
