package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ScatteredTest is 4 KiB random reads at queue depth 32 confined to a hot
// set of zones spread evenly over the whole target (issue #36's scattered
// workload): a cache that promotes more than the blocks read shows it here,
// where a working set at the start of the volume would hide it. Only its ID
// selects it.
var ScatteredTest = Test{ID: "rnd4k-q32t1-scattered-read", Label: "RND4K Q32T1 scattered read", Random: true,
	BlockSize: 4 << 10, QueueDepth: 32, Direction: Read, Scattered: true}

// DefaultScatterBlockBytes is ssdcache's cache block (256 KiB), the unit
// in which the touched blocks are counted unless -scatter-block-size says
// otherwise.
const DefaultScatterBlockBytes = 256 << 10

// ScatterPlan places a working set's hot bytes on a target: Zones zones of
// HotPerZoneBytes each, the first at offset 0, one every ZoneStrideBytes,
// so the last ends within the last Zones-th of the target.
type ScatterPlan struct {
	Zones           int   `json:"zones"`
	ZoneStrideBytes int64 `json:"zoneStrideBytes"`
	HotPerZoneBytes int64 `json:"hotPerZoneBytes"`
}

// scatterAlign keeps zone starts on whole MiB, so a zone's hot bytes start
// on a cache block of any size up to 1 MiB.
const scatterAlign = 1 << 20

// PlanScatter spreads hotBytes over zones zones of a target of
// deviceBytes. fio's zoned_abs takes whole percentages, so zones must
// divide 100.
func PlanScatter(deviceBytes, hotBytes int64, zones int) (ScatterPlan, error) {
	if zones < 1 || zones > 100 || 100%zones != 0 {
		return ScatterPlan{}, fmt.Errorf("scatter-zones: %d; allowed: a divisor of 100 (fio's zoned_abs takes whole percentages), e.g. 100, 50, 20", zones)
	}
	if hotBytes%int64(zones) != 0 || (hotBytes/int64(zones))%ScatteredTest.BlockSize != 0 {
		return ScatterPlan{}, fmt.Errorf("working set of %d bytes over %d zones: allowed: a working set that splits into whole 4 KiB blocks per zone", hotBytes, zones)
	}
	p := ScatterPlan{Zones: zones, HotPerZoneBytes: hotBytes / int64(zones), ZoneStrideBytes: deviceBytes / int64(zones) / scatterAlign * scatterAlign}
	if p.ZoneStrideBytes < p.HotPerZoneBytes {
		return ScatterPlan{}, fmt.Errorf("a target of %d bytes has zones of %d bytes, smaller than the %d hot bytes each of the %d zones holds: allowed: a working set of at most %d bytes",
			deviceBytes, p.ZoneStrideBytes, p.HotPerZoneBytes, zones, p.ZoneStrideBytes*int64(zones))
	}
	return p, nil
}

// SpanBytes is what fio's job covers: every zone, hot and cold parts.
func (p ScatterPlan) SpanBytes() int64 { return p.ZoneStrideBytes * int64(p.Zones) }

// HotBytes is the hot set.
func (p ScatterPlan) HotBytes() int64 { return p.HotPerZoneBytes * int64(p.Zones) }

// fioDistribution is fio's random_distribution: each zone's hot part gets
// an equal share of the reads, its cold rest none (fio 3.33 accepts 0 %
// zones and never picks them), so reads fall uniformly on the hot set.
func (p ScatterPlan) fioDistribution() string {
	share := 100 / p.Zones
	cold := p.ZoneStrideBytes - p.HotPerZoneBytes
	parts := make([]string, 0, 2*p.Zones)
	for range p.Zones {
		parts = append(parts, fmt.Sprintf("%d/%d", share, p.HotPerZoneBytes))
		if cold > 0 {
			parts = append(parts, fmt.Sprintf("0/%d", cold))
		}
	}
	return "zoned_abs:" + strings.Join(parts, ":")
}

// ScatterPass is what one scattered test read, from fio's I/O log: the
// figures a cache's promoted bytes are judged against.
type ScatterPass struct {
	ScatterPlan
	// Reads is the number of reads fio logged.
	Reads int64 `json:"reads"`
	// TouchedBytes are the distinct 4 KiB blocks read, in bytes.
	TouchedBytes int64 `json:"touchedBytes"`
	// BlockBytes is the cache block the touched blocks are counted in.
	BlockBytes int64 `json:"blockBytes"`
	// TouchedBlockBytes are the distinct cache blocks read, in bytes: what
	// a cache that promotes exactly the blocks read would copy.
	TouchedBlockBytes int64 `json:"touchedBlockBytes"`
	// OutsideHot counts reads outside the hot zones (0 unless fio's
	// distribution misbehaves).
	OutsideHot int64 `json:"outsideHot"`
}

// ParseIOLog counts what fio's I/O log (version 3: "time file action offset
// length") read against the plan, in blocks of blockBytes.
func ParseIOLog(log []byte, plan ScatterPlan, blockBytes int64) (ScatterPass, error) {
	pass := ScatterPass{ScatterPlan: plan, BlockBytes: blockBytes}
	pages, blocks := map[int64]bool{}, map[int64]bool{}
	s := bufio.NewScanner(bytes.NewReader(log))
	for line := 1; s.Scan(); line++ {
		f := strings.Fields(s.Text())
		if len(f) != 5 || f[2] != "read" {
			continue // the header, add, open, close
		}
		off, err1 := strconv.ParseInt(f[3], 10, 64)
		n, err2 := strconv.ParseInt(f[4], 10, 64)
		if err1 != nil || err2 != nil || n <= 0 {
			return pass, fmt.Errorf("fio I/O log line %d: %q: want time file read offset length", line, s.Text())
		}
		pass.Reads++
		if off%plan.ZoneStrideBytes+n > plan.HotPerZoneBytes || off >= plan.SpanBytes() {
			pass.OutsideHot++
		}
		for p := off / ScatteredTest.BlockSize; p <= (off+n-1)/ScatteredTest.BlockSize; p++ {
			pages[p] = true
		}
		for b := off / blockBytes; b <= (off+n-1)/blockBytes; b++ {
			blocks[b] = true
		}
	}
	pass.TouchedBytes = int64(len(pages)) * ScatteredTest.BlockSize
	pass.TouchedBlockBytes = int64(len(blocks)) * blockBytes
	return pass, s.Err()
}

// IOLogFiles reads back and removes fio's I/O logs.
type IOLogFiles interface {
	ReadFile(path string) ([]byte, error)
	Remove(path string) error
}

// OSIOLogFiles is IOLogFiles on the local filesystem.
type OSIOLogFiles struct{}

// ReadFile reads path.
func (OSIOLogFiles) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// Remove removes path.
func (OSIOLogFiles) Remove(path string) error { return os.Remove(path) }

// checkScatter refuses, before any I/O, a target the scattered test cannot
// spread its zones over: only block devices, whose size is the volume's
// (a file would be laid out only up to the working set).
func (b *Bench) checkScatter(t Target, info TargetInfo) error {
	if !b.cfg.scattered() {
		return nil
	}
	if info.Kind != KindBlock {
		return fmt.Errorf("target %s: %s is %s; the test %s reads zones spread over a whole block device", t.Name, t.Path, info.Kind, ScatteredTest.ID)
	}
	for _, ws := range b.cfg.WorkingSets {
		if _, err := PlanScatter(info.Size, ws.Bytes, b.cfg.ScatterZones); err != nil {
			return fmt.Errorf("target %s: %w", t.Name, err)
		}
	}
	return nil
}

// measureScattered runs the scattered test: random 4 KiB reads over the
// working set's hot zones spread over the whole target, then counts from
// fio's I/O log what they touched. Each working set of a plan spreads over
// the same zones: run one working set per invocation for a cold hot set.
func (b *Bench) measureScattered(ctx context.Context, pos position, test Test) (Measurement, *ScatterPass, error) {
	plan, err := PlanScatter(b.sizes[pos.target.Path], pos.ws.Bytes, b.cfg.ScatterZones)
	if err != nil {
		return Measurement{}, nil, err
	}
	log := filepath.Join(b.cfg.IOLogDir, fmt.Sprintf("ssdcache-bench-iolog-%s-%d-%d", pos.target.Name, pos.wsIndex+1, pos.run))
	m, err := b.fio(ctx, fioJobSpec{
		Path: pos.target.Path, Size: plan.SpanBytes(), Test: test, ReadOnly: b.cfg.ReadOnly, Runtime: b.cfg.RuntimeLimit,
		IOLimit: b.cfg.IOLimit, RandSeed: b.cfg.RandSeed, Distribution: plan.fioDistribution(), IOLog: log,
	})
	if err != nil {
		return m, nil, err
	}
	data, err := b.deps.IOLogs.ReadFile(log)
	if err != nil {
		return m, nil, fmt.Errorf("reading fio's I/O log: %w", err)
	}
	pass, err := ParseIOLog(data, plan, b.cfg.ScatterBlockBytes)
	if err != nil {
		return m, nil, err
	}
	if err := b.deps.IOLogs.Remove(log); err != nil {
		return m, nil, fmt.Errorf("removing fio's I/O log: %w", err)
	}
	return m, &pass, nil
}
