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
}

var _ dm.MetadataTools = (*Metadata)(nil)

// NewMetadata returns a fake with no formatted device.
func NewMetadata() *Metadata { return &Metadata{devices: map[string]dm.CacheMetadata{}} }

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
