package cache

import (
	"slices"
	"sync"

	"github.com/ssdcache/ssdcache/pkg/dm"
)

// A promotion copies blocks into the free blocks of a cache that is live,
// serving reads from the blocks it maps, which is safe only while the
// engine knows which of its blocks the kernel maps: those the engine's last
// load of the table wrote into the metadata, on PolicyFilling, which maps
// no block of its own. layouts keeps that knowledge per volume, from the
// load that wrote it until any other load or removal of the volume's
// table. A restarted process starts without it; its first promotion of a
// volume then copies with the cache swapped out, and learns it.
type layouts struct {
	mu       sync.Mutex
	byVolume map[string]layout
}

// layout is what a cache table was loaded with.
type layout struct {
	target dm.CacheTarget
	mapped []dm.Mapping
}

func newLayouts() *layouts { return &layouts{byVolume: map[string]layout{}} }

// loaded records the mappings a volume's new cache table went live with;
// a table on any policy but PolicyFilling maps blocks of its own, and is
// recorded as unknown.
func (l *layouts) loaded(volumeID string, table dm.Table, mapped []dm.Mapping) {
	l.mu.Lock()
	defer l.mu.Unlock()
	target, cached := table.Target.(dm.CacheTarget)
	if !cached || target.Policy != PolicyFilling {
		delete(l.byVolume, volumeID)
		return
	}
	l.byVolume[volumeID] = layout{target: target, mapped: slices.Clone(mapped)}
}

// forget drops what is known of a volume's table: it is being loaded again
// or removed.
func (l *layouts) forget(volumeID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byVolume, volumeID)
}

// mapped returns the mappings of the volume's live cache, given its table
// and the count of blocks it says it uses, when they are known: the table
// is the one recorded, and uses as many blocks as that load mapped.
func (l *layouts) mapped(volumeID string, live dm.CacheTarget, used uint64) ([]dm.Mapping, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lay, ok := l.byVolume[volumeID]
	if !ok || !sameCache(lay.target, live) || used != uint64(len(lay.mapped)) {
		return nil, false
	}
	return slices.Clone(lay.mapped), true
}

// sameCache tells whether two cache targets name the same devices, block
// size, mode and policy: a table read back from the kernel may spell its
// other arguments differently from the one loaded.
func sameCache(a, b dm.CacheTarget) bool {
	return a.Metadata == b.Metadata && a.Data == b.Data && a.Origin == b.Origin &&
		a.BlockSectors == b.BlockSectors && a.Mode == b.Mode && a.Policy == b.Policy
}
