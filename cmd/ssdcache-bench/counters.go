package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

// dmCacheCounters samples dm-cache counters through `dmsetup status --noflush`
// (dm.Interface.Status), so sampling never commits cache metadata.
type dmCacheCounters struct {
	dm dm.Interface
}

var _ bench.CacheCounters = dmCacheCounters{}

// Sample accepts a dm name or a /dev/mapper path.
func (c dmCacheCounters) Sample(ctx context.Context, device string) (bench.Counters, error) {
	name := strings.TrimPrefix(device, "/dev/mapper/")
	out, err := c.dm.Status(ctx, name)
	if err != nil {
		return bench.Counters{}, err
	}
	return countersFromStatus(name, out)
}

// countersFromStatus finds the one cache segment in a device's status output.
// A device with several cache segments is refused: summing 32-bit counters
// would break wrap-safe deltas.
func countersFromStatus(name, out string) (bench.Counters, error) {
	var cacheLines, types []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		types = append(types, fields[2])
		if fields[2] == "cache" {
			cacheLines = append(cacheLines, line)
		}
	}
	if len(cacheLines) == 0 && len(types) > 0 {
		return bench.Counters{}, fmt.Errorf("dm device %s (segment types: %v): %w", name, types, bench.ErrNoCacheTable)
	}
	if len(cacheLines) != 1 {
		return bench.Counters{}, fmt.Errorf("dm device %s: want exactly one cache segment, found %d (segment types: %v)", name, len(cacheLines), types)
	}
	st, err := dm.ParseCacheStatus(cacheLines[0])
	if err != nil {
		return bench.Counters{}, fmt.Errorf("dm device %s: %w", name, err)
	}
	if st.Failed {
		return bench.Counters{}, fmt.Errorf("dm device %s: cache reports %s", name, st.Health)
	}
	return bench.Counters{
		ReadHits: st.ReadHits, ReadMisses: st.ReadMisses,
		WriteHits: st.WriteHits, WriteMisses: st.WriteMisses,
		Demotions: st.Demotions, Promotions: st.Promotions,
	}, nil
}
