package cache

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/ssdcache/ssdcache/pkg/cachesize"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

// cacheBytesTagPrefix records on the data LV the cache size it was created
// for, so a later plan can tell "right size" exactly, whatever the extent size.
const cacheBytesTagPrefix = "ssdcache.io/cache-bytes="

// observed is what the kernel and LVM say about one volume.
type observed struct {
	staged bool
	table  dm.Table
	// cacheLVs are the volume's metadata and data LVs in any cache pool.
	cacheLVs []lvm.LV
	// uncachedWrites, on a linear table, has counted every write since the
	// cache in front of it was taken out with its LVs kept (a pause): the
	// kept metadata maps the blocks the data LV held then.
	uncachedWrites *dm.WriteRegion
}

// desired is what the volume should look like.
type desired struct {
	origin dm.DevNum
	length uint64 // sectors
	cache  *Spec  // nil: no cache
	vg     string // cache pool of cache.Class
	// minBlockSectors: the engine's smallest block size for a new cache
	// (Engine.minBlockSectors; needed with a cache).
	minBlockSectors uint64
}

// blockSectors is the block size of the cache wanted.
func (d desired) blockSectors() uint64 {
	return cachesize.BlockSectorsFor(d.cache.SizeBytes, d.minBlockSectors)
}

// metadataBytes is the metadata LV size of the cache wanted.
func (d desired) metadataBytes() uint64 {
	return cachesize.MetadataBytesFor(d.cache.SizeBytes, d.blockSectors())
}

type step string

const (
	stepLoadLinear step = "load-linear"
	// stepRemoveSpareMetadata removes a metadata LV the live cache table
	// does not use: a promotion that swapped metadata (swapMetadata) was
	// cut short before it removed the one it replaced, or before its table
	// went live.
	stepRemoveSpareMetadata step = "remove-spare-metadata"
	stepRemoveCacheLVs      step = "remove-cache-lvs"
	stepCreateCacheLVs      step = "create-cache-lvs"
	stepSaveHotSet          step = "save-hot-set"
	stepZeroMetadata        step = "zero-metadata"
	stepWarm                step = "warm"
	stepLoadCache           step = "load-cache"
	// stepTrackUncachedWrites starts counting writes before a live cache is
	// taken out with its LVs kept, so that none reaches the origin alone
	// uncounted; stepMapKept maps again what the kept cache held, but for
	// the blocks written since; stepForgetUncachedWrites deletes the count
	// when the LVs it vouches for go or are replaced.
	stepTrackUncachedWrites  step = "track-uncached-writes"
	stepMapKept              step = "map-kept"
	stepForgetUncachedWrites step = "forget-uncached-writes"
	// stepUntagKept deletes the tag of cache LVs a clean unstage kept,
	// which Stage turns into a count of writes: a change that finds it has
	// no count to go by, and must not leave it for a later stage to trust.
	stepUntagKept step = "untag-kept"
)

// plan lists the steps from obs to want. It never zeroes metadata that a
// live cache table is using, and always zeroes it before any other cache
// table is loaded (safety rule 2): after a crash, a reboot or on another
// node, dm-cache would take every block as dirty and write stale SSD blocks
// over newer origin data. Dropping the cache is a table swap to linear and
// needs no flush, because writethrough never holds data the origin lacks
// (safety rule 1). A paused cache is its LVs behind a linear table.
func plan(obs observed, want desired) []step {
	var steps []step
	if _, tagged := taggedClean(obs.cacheLVs); tagged && !done(obs, want) {
		steps = append(steps, stepUntagKept)
	}
	if spare, ok := spareMetadata(obs); ok {
		steps = append(steps, stepRemoveSpareMetadata)
		obs.cacheLVs = withoutLV(obs.cacheLVs, spare)
	}
	if done(obs, want) {
		return steps
	}
	_, isCache := obs.table.Target.(dm.CacheTarget)
	_, _, fit := fittingLVs(obs.cacheLVs, want)
	paused := want.cache != nil && want.cache.Mode == ModePaused
	if obs.uncachedWrites != nil && !fit {
		steps = append(steps, stepForgetUncachedWrites)
	}
	if isCache && fit && paused {
		steps = append(steps, stepTrackUncachedWrites)
	}
	if isCache || obs.table.Length != want.length {
		steps = append(steps, stepLoadLinear)
	}
	// From here no live table uses the cache LVs: what their metadata maps
	// is the volume's hot set, kept before it is zeroed or removed.
	if len(obs.cacheLVs) > 0 {
		steps = append(steps, stepSaveHotSet)
	}
	if want.cache == nil {
		if len(obs.cacheLVs) > 0 {
			steps = append(steps, stepRemoveCacheLVs)
		}
		return steps
	}
	if !fit {
		if len(obs.cacheLVs) > 0 {
			steps = append(steps, stepRemoveCacheLVs)
		}
		steps = append(steps, stepCreateCacheLVs)
	}
	if paused {
		return steps
	}
	return append(steps, fillSteps(obs, want, fit)...)
}

// fillSteps fill a cache about to load: with what its kept LVs held before
// it was taken out, when every write since was counted (a resume), else
// from zeroed metadata (safety rule 2) and, if it warms up, the hot set.
func fillSteps(obs observed, want desired, fit bool) []step {
	_, linear := obs.table.Target.(dm.LinearTarget)
	if fit && linear && obs.uncachedWrites != nil {
		return []step{stepMapKept, stepLoadCache}
	}
	steps := []step{stepZeroMetadata}
	if want.cache.Warm {
		steps = append(steps, stepWarm)
	}
	return append(steps, stepLoadCache)
}

// spareMetadata is the volume's second metadata LV, which its live cache
// table does not use. With no live cache table both are suspect, and
// neither is returned: the pair does not fit, and the plan makes new LVs.
func spareMetadata(obs observed) (lvm.LV, bool) {
	live, isCache := obs.table.Target.(dm.CacheTarget)
	var metas []lvm.LV
	for _, lv := range obs.cacheLVs {
		if lv.Role() == lvm.RoleCacheMetadata {
			metas = append(metas, lv)
		}
	}
	if !isCache || len(metas) != 2 {
		return lvm.LV{}, false
	}
	for i, lv := range metas {
		if lv.DevNum == live.Metadata {
			return metas[1-i], true
		}
	}
	return lvm.LV{}, false
}

func withoutLV(lvs []lvm.LV, gone lvm.LV) []lvm.LV {
	return slices.DeleteFunc(slices.Clone(lvs), func(lv lvm.LV) bool { return lv.VG == gone.VG && lv.Name == gone.Name })
}

// done says whether the volume already is as wanted: a writethrough cache
// over the fitting LVs, or for a paused cache a linear table with the LVs
// kept (a legacy passthrough table is not done: it becomes one of these).
func done(obs observed, want desired) bool {
	meta, data, fit := fittingLVs(obs.cacheLVs, want)
	if want.cache == nil || !fit || obs.table.Length != want.length {
		return false
	}
	switch live := obs.table.Target.(type) {
	case dm.CacheTarget:
		return want.cache.Mode == ModeReadCache && live.Mode == dm.Writethrough &&
			live.Metadata == meta.DevNum && live.Data == data.DevNum && live.Origin == want.origin
	case dm.LinearTarget:
		return want.cache.Mode == ModePaused
	}
	return false
}

// fittingLVs returns the metadata and data LVs if they are exactly the pair
// want needs: one of each, active, in the right pool, of the right size.
func fittingLVs(lvs []lvm.LV, want desired) (meta, data lvm.LV, fit bool) {
	if want.cache == nil || len(lvs) != 2 {
		return meta, data, false
	}
	for _, lv := range lvs {
		switch lv.Role() {
		case lvm.RoleCacheMetadata:
			meta = lv
		case lvm.RoleCacheData:
			data = lv
		}
	}
	size := want.cache.SizeBytes
	fit = meta.Name != "" && data.Name != "" && meta.VG == want.vg && data.VG == want.vg &&
		!meta.DevNum.IsZero() && !data.DevNum.IsZero() &&
		requestedBytes(data) == size && meta.Size >= want.metadataBytes()
	return meta, data, fit
}

func requestedBytes(data lvm.LV) uint64 {
	for _, t := range data.Tags {
		if len(t) > len(cacheBytesTagPrefix) && t[:len(cacheBytesTagPrefix)] == cacheBytesTagPrefix {
			n, err := strconv.ParseUint(t[len(cacheBytesTagPrefix):], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

func cacheBytesTag(size uint64) string { return fmt.Sprintf("%s%d", cacheBytesTagPrefix, size) }

// The policies a cache table runs. While the promoter fills a cache it runs
// "cleaner", smq without migrations: it serves the blocks mapped and promotes
// none, where smq would copy some of them from the HDD a second time during
// the application's first pass over new data, and slow that pass (a quarter
// of a 64 MiB pass in the VM bench) for blocks the promoter maps in the
// next batch anyway. Once the cache is full, or nothing promotes, smq runs:
// it replaces blocks by use.
const (
	PolicyFilling   = "cleaner"
	PolicyReplacing = "smq"
)

// cacheTable builds the writethrough dm-cache table for want over the given
// LVs, running policy.
func cacheTable(want desired, meta, data lvm.LV, policy string) (dm.Table, error) {
	target := dm.CacheTarget{
		Metadata: meta.DevNum, Data: data.DevNum, Origin: want.origin,
		BlockSectors: want.blockSectors(), Mode: dm.Writethrough, Policy: policy,
		// Format 2 keeps dirty bits apart from the mappings, as lvm2 does by default.
		ExtraFeatures: []string{"metadata2"},
	}
	if err := target.Validate(); err != nil {
		return dm.Table{}, err
	}
	return dm.Table{Length: want.length, Target: target}, nil
}

func linearTable(want desired) dm.Table {
	return dm.Table{Length: want.length, Target: dm.LinearTarget{Device: want.origin}}
}

// originOf returns the origin device of a table ssdcache made.
func originOf(t dm.Table) (dm.DevNum, bool) {
	switch target := t.Target.(type) {
	case dm.LinearTarget:
		return target.Device, target.Offset == 0
	case dm.CacheTarget:
		return target.Origin, true
	}
	return dm.DevNum{}, false
}
