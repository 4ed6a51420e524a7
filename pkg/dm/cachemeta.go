package dm

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/command"
)

// CacheMetadata is the content of a dm-cache metadata device in the form
// thin-provisioning-tools' cache_dump writes and cache_restore reads.
type CacheMetadata struct {
	BlockSectors uint64
	CacheBlocks  uint64
	Policy       string
	Mappings     []Mapping
}

// Mapping says that cache block Cache holds origin block Origin.
type Mapping struct {
	Cache, Origin uint64
	Dirty         bool
}

// MetadataTools reads and writes dm-cache metadata devices that no live
// table uses. The real implementation runs cache_dump and cache_restore.
type MetadataTools interface {
	// Dump reads the mappings of a metadata device.
	Dump(ctx context.Context, path string) (CacheMetadata, error)
	// Restore formats a metadata device with exactly md: a clean shutdown,
	// metadata format 2, no hints.
	Restore(ctx context.Context, path string, md CacheMetadata) error
	// Superblock reads the flags of a metadata device, live or idle.
	Superblock(ctx context.Context, path string) (CacheSuperblock, error)
}

type xmlSuperblock struct {
	XMLName      xml.Name     `xml:"superblock"`
	UUID         string       `xml:"uuid,attr"`
	BlockSize    uint64       `xml:"block_size,attr"`
	NrCacheBlock uint64       `xml:"nr_cache_blocks,attr"`
	Policy       string       `xml:"policy,attr"`
	HintWidth    uint64       `xml:"hint_width,attr"`
	Mappings     []xmlMapping `xml:"mappings>mapping"`
}

type xmlMapping struct {
	Cache  uint64 `xml:"cache_block,attr"`
	Origin uint64 `xml:"origin_block,attr"`
	Dirty  bool   `xml:"dirty,attr"`
}

// smqHintWidth is the width of smq's per-block hint, which cache_restore
// needs even when no hints are given.
const smqHintWidth = 4

// MarshalCacheXML renders md as cache_restore's input.
func MarshalCacheXML(md CacheMetadata) ([]byte, error) {
	if err := cachesize.ValidateBlockSectors(md.BlockSectors); err != nil {
		return nil, err
	}
	sb := xmlSuperblock{BlockSize: md.BlockSectors, NrCacheBlock: md.CacheBlocks, Policy: md.Policy, HintWidth: smqHintWidth}
	seen := make(map[uint64]bool, len(md.Mappings))
	for _, m := range md.Mappings {
		if m.Cache >= md.CacheBlocks || seen[m.Cache] {
			return nil, fmt.Errorf("mapping of origin block %d to cache block %d: cache blocks must be unique and below %d", m.Origin, m.Cache, md.CacheBlocks)
		}
		seen[m.Cache] = true
		sb.Mappings = append(sb.Mappings, xmlMapping(m))
	}
	return xml.MarshalIndent(sb, "", "  ")
}

// UnmarshalCacheXML parses cache_dump's output.
func UnmarshalCacheXML(data []byte) (CacheMetadata, error) {
	var sb xmlSuperblock
	if err := xml.Unmarshal(data, &sb); err != nil {
		return CacheMetadata{}, fmt.Errorf("parse cache metadata XML: %w", err)
	}
	md := CacheMetadata{BlockSectors: sb.BlockSize, CacheBlocks: sb.NrCacheBlock, Policy: sb.Policy}
	for _, m := range sb.Mappings {
		md.Mappings = append(md.Mappings, Mapping(m))
	}
	return md, nil
}

// CacheTools implements MetadataTools with thin-provisioning-tools.
type CacheTools struct {
	run *command.Runner
	// TempDir holds cache_restore's input, which must be a regular file.
	TempDir string
}

// NewCacheTools returns MetadataTools that run through run.
func NewCacheTools(run *command.Runner, tempDir string) *CacheTools {
	return &CacheTools{run: run, TempDir: tempDir}
}

var _ MetadataTools = (*CacheTools)(nil)

func (c *CacheTools) Dump(ctx context.Context, path string) (CacheMetadata, error) {
	out, err := c.run.Run(ctx, "cache_dump", path)
	if err != nil {
		return CacheMetadata{}, err
	}
	return UnmarshalCacheXML(out)
}

func (c *CacheTools) Restore(ctx context.Context, path string, md CacheMetadata) error {
	data, err := MarshalCacheXML(md)
	if err != nil {
		return err
	}
	// The directory may not exist yet on a node that saved no hot set so far.
	if err := os.MkdirAll(c.TempDir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.TempDir, "cache-restore-*.xml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = c.run.Run(ctx, "cache_restore", "-i", f.Name(), "-o", path, "--metadata-version", "2")
	return err
}
