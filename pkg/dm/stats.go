package dm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// statsProgram names the dm-stats regions ssdcache creates, so that one an
// interrupted warm-up left behind is found and deleted.
const statsProgram = "ssdcache-writes"

func (d *Dmsetup) message(ctx context.Context, name, msg string) (string, error) {
	return d.dmsetup(ctx, "message", name, "0", msg)
}

func (d *Dmsetup) TrackWrites(ctx context.Context, name string, areaSectors uint64) (uint64, error) {
	if areaSectors == 0 {
		return 0, fmt.Errorf("track writes of %s: area size must be at least one sector", name)
	}
	list, err := d.message(ctx, name, "@stats_list "+statsProgram)
	if err != nil {
		return 0, err
	}
	for _, id := range parseStatsList(list) {
		if err := d.UntrackWrites(ctx, name, id); err != nil {
			return 0, err
		}
	}
	out, err := d.message(ctx, name, fmt.Sprintf("@stats_create - %d %s", areaSectors, statsProgram))
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dm-stats region of %s: %q is not a region ID", name, out)
	}
	return id, nil
}

func (d *Dmsetup) WrittenAreas(ctx context.Context, name string, region uint64) ([]uint64, error) {
	out, err := d.message(ctx, name, fmt.Sprintf("@stats_print %d", region))
	if err != nil {
		return nil, err
	}
	return ParseWrittenAreas(out)
}

func (d *Dmsetup) UntrackWrites(ctx context.Context, name string, region uint64) error {
	_, err := d.message(ctx, name, fmt.Sprintf("@stats_delete %d", region))
	return err
}

// parseStatsList returns the region IDs of "@stats_list" lines,
// "<region_id>: <start>+<length> <step> <program_id> <aux_data>".
func parseStatsList(out string) []uint64 {
	var ids []uint64
	for _, line := range strings.Split(out, "\n") {
		id, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if n, err := strconv.ParseUint(id, 10, 64); ok && err == nil {
			ids = append(ids, n)
		}
	}
	return ids
}

// ParseWrittenAreas returns the indexes of the areas of a region starting
// at sector 0 that completed a write, from "@stats_print": one line per area,
// "<start>+<length>" and then the counters of /proc/diskstats, the fifth
// being writes completed and the seventh sectors written.
func ParseWrittenAreas(out string) ([]uint64, error) {
	var areas []uint64
	var areaLen uint64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("dm-stats line %q: want <start>+<length> and at least 7 counters", line)
		}
		start, length, ok := strings.Cut(f[0], "+")
		s, err1 := strconv.ParseUint(start, 10, 64)
		n, err2 := strconv.ParseUint(length, 10, 64)
		if !ok || err1 != nil || err2 != nil || n == 0 {
			return nil, fmt.Errorf("dm-stats line %q: area %q is not <start>+<length>", line, f[0])
		}
		if areaLen == 0 {
			areaLen = n // every area but a shorter last one has the first's length
		}
		if f[5] != "0" || f[7] != "0" {
			areas = append(areas, s/areaLen)
		}
	}
	return areas, nil
}
