package dmfake

import (
	"context"
	"fmt"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// Metadata is a fake dm.MetadataTools: it keeps what was restored per path,
// and a test may put what a device holds with Put.
type Metadata struct {
	mu      sync.Mutex
	devices map[string]dm.CacheMetadata
	// Calls records "dump <path>" and "restore <path> <n> mappings".
	Calls []string
	// FailRestore makes every Restore fail.
	FailRestore error
	// superblocks are the flags a test gave a path with SetSuperblock.
	superblocks map[string]dm.CacheSuperblock
}

var _ dm.MetadataTools = (*Metadata)(nil)

// NewMetadata returns a fake with no formatted device.
func NewMetadata() *Metadata {
	return &Metadata{devices: map[string]dm.CacheMetadata{}, superblocks: map[string]dm.CacheSuperblock{}}
}

// SetSuperblock makes path's superblock read as sb, as the kernel's last
// commit (or open) left it.
func (m *Metadata) SetSuperblock(path string, sb dm.CacheSuperblock) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.superblocks[path] = sb
}

// Superblock returns what SetSuperblock gave path; metadata that was only
// restored or Put reads as cache_restore leaves it: cleanly shut down.
func (m *Metadata) Superblock(_ context.Context, path string) (dm.CacheSuperblock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Calls = append(m.Calls, "superblock "+path)
	if sb, ok := m.superblocks[path]; ok {
		return sb, nil
	}
	if _, ok := m.devices[path]; ok {
		return dm.CacheSuperblock{CleanShutdown: true, Version: 2}, nil
	}
	return dm.CacheSuperblock{}, fmt.Errorf("%s: not dm-cache metadata: magic 0, want 1623043", path)
}

// Put makes path hold md, as a live cache would have left it.
func (m *Metadata) Put(path string, md dm.CacheMetadata) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices[path] = md
}

// Get returns what path holds.
func (m *Metadata) Get(path string) (dm.CacheMetadata, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md, ok := m.devices[path]
	return md, ok
}

// Forget stands for zeroed metadata: nothing to dump.
func (m *Metadata) Forget(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.devices, path)
	delete(m.superblocks, path)
}

func (m *Metadata) Dump(_ context.Context, path string) (dm.CacheMetadata, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Calls = append(m.Calls, "dump "+path)
	md, ok := m.devices[path]
	if !ok {
		return dm.CacheMetadata{}, fmt.Errorf("cache_dump %s: bad checksum in superblock", path)
	}
	return md, nil
}

func (m *Metadata) Restore(_ context.Context, path string, md dm.CacheMetadata) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Calls = append(m.Calls, fmt.Sprintf("restore %s %d mappings", path, len(md.Mappings)))
	if m.FailRestore != nil {
		return m.FailRestore
	}
	if _, err := dm.MarshalCacheXML(md); err != nil {
		return err
	}
	m.devices[path] = md
	return nil
}
