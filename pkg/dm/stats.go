package dm

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// writesProgram is the program ID of the dm-stats regions ssdcache
// creates: one an interrupted warm-up left behind is found by it and
// deleted.
const writesProgram = "ssdcache-writes"

// uncachedProgram is the program ID of the region that counts the writes
// through a volume while its cache LVs are kept behind a linear table
// (paused): it outlives warm-ups, promotions and the plugin, and tells the
// resume which kept blocks the origin changed under.
const uncachedProgram = "ssdcache-uncached"

// MaxTrackedAreas bounds the areas of one dm-stats region: the kernel keeps
// about a hundred bytes per area for every possible CPU, so callers coarsen
// the areas of a large device rather than pin hundreds of megabytes
// (TrackedAreasFor bounds them by the CPU count too).
const MaxTrackedAreas = 16384

// Kernel memory of a dm-stats region (drivers/md/dm-stats.c): about
// statsAreaBytes for each area plus statsAreaBytesPerCPU for each area and
// possible CPU, as the issue that bounded it measured.
const (
	statsAreaBytes       = 120
	statsAreaBytesPerCPU = 104
	// StatsRegionBudget is the most kernel memory one region may take.
	StatsRegionBudget = 16 << 20
)

// TrackedAreasFor is how many areas a region may have on a node with
// possibleCPUs (num_possible_cpus): at most MaxTrackedAreas, and few enough
// that the region takes at most StatsRegionBudget of kernel memory
// (16,384 areas on up to 8 CPUs, 2,475 on 64, 627 on 256; never fewer than
// one). Fewer areas only make writes counted more coarsely: a warm-up then
// drops more copied blocks around a write, never maps a written one.
func TrackedAreasFor(possibleCPUs int) uint64 {
	perArea := uint64(statsAreaBytes + statsAreaBytesPerCPU*max(possibleCPUs, 1))
	return max(1, min(MaxTrackedAreas, StatsRegionBudget/perArea))
}

// ParseCPUList counts the CPUs of a kernel CPU list such as
// /sys/devices/system/cpu/possible's "0-63" or "0,2-3".
func ParseCPUList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("CPU list %q: %q is not a CPU number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("CPU list %q: %q is not a range of CPUs", s, part)
			}
		}
		n += b - a + 1
	}
	return n, nil
}

// message sends msg to sector 0 of device name: through the control device
// when d has one (ReadingFrom), else with dmsetup.
func (d *Dmsetup) message(ctx context.Context, name, msg string) (string, error) {
	if d.kernel != nil {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		out, err := d.kernel.message(name, msg)
		if err != nil {
			return "", fmt.Errorf("message %q to %s: %w", msg, name, err)
		}
		return out, nil
	}
	return d.dmsetup(ctx, "message", name, "0", msg)
}

// statsRegion is one dm-stats region: the size of its areas, in sectors.
type statsRegion struct{ areaSectors uint64 }

// regions lists name's dm-stats regions of program by ID.
func (d *Dmsetup) regions(ctx context.Context, name, program string) (map[uint64]statsRegion, error) {
	out, err := d.message(ctx, name, "@stats_list "+program)
	if err != nil {
		return nil, err
	}
	return parseStatsList(out), nil
}

func (d *Dmsetup) createRegion(ctx context.Context, name, program string, areaSectors uint64) (uint64, error) {
	if areaSectors == 0 {
		return 0, fmt.Errorf("track I/O of %s: area size must be at least one sector", name)
	}
	out, err := d.message(ctx, name, fmt.Sprintf("@stats_create - %d %s", areaSectors, program))
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("dm-stats region of %s: %q is not a region ID", name, out)
	}
	return id, nil
}

// deleteRegions deletes name's regions of program but keep (if any).
func (d *Dmsetup) deleteRegions(ctx context.Context, name, program string, keep func(id, areaSectors uint64) bool) (kept bool, err error) {
	regions, err := d.regions(ctx, name, program)
	if err != nil {
		return false, err
	}
	for id, r := range regions {
		if keep != nil && !kept && keep(id, r.areaSectors) {
			kept = true
			continue
		}
		if err := d.Untrack(ctx, name, id); err != nil {
			return kept, err
		}
	}
	return kept, nil
}

func (d *Dmsetup) TrackWrites(ctx context.Context, name string, areaSectors uint64) (uint64, error) {
	if _, err := d.deleteRegions(ctx, name, writesProgram, nil); err != nil {
		return 0, err
	}
	return d.createRegion(ctx, name, writesProgram, areaSectors)
}

func (d *Dmsetup) TrackUncachedWrites(ctx context.Context, name string, areaSectors uint64) (WriteRegion, error) {
	if r, ok, err := d.UncachedWrites(ctx, name); err != nil || ok {
		return r, err
	}
	id, err := d.createRegion(ctx, name, uncachedProgram, areaSectors)
	return WriteRegion{ID: id, AreaSectors: areaSectors}, err
}

// UncachedWrites returns the lowest-numbered region of uncachedProgram;
// there is only ever one unless a delete failed, and any of them has
// counted since before the cache was taken out.
func (d *Dmsetup) UncachedWrites(ctx context.Context, name string) (WriteRegion, bool, error) {
	regions, err := d.regions(ctx, name, uncachedProgram)
	if err != nil || len(regions) == 0 {
		return WriteRegion{}, false, err
	}
	id := slices.Min(slices.Collect(maps.Keys(regions)))
	return WriteRegion{ID: id, AreaSectors: regions[id].areaSectors}, true, nil
}

func (d *Dmsetup) WrittenAreas(ctx context.Context, name string, region uint64) ([]uint64, error) {
	out, err := d.message(ctx, name, fmt.Sprintf("@stats_print %d", region))
	if err != nil {
		return nil, err
	}
	return ParseWrittenAreas(out)
}

// maxAreaRuns bounds the "@stats_print <region> <first line> <lines>"
// messages of one WrittenAreasAmong: areas that fall in more runs of
// consecutive areas than this are read with one print of the region.
const maxAreaRuns = 16

func (d *Dmsetup) WrittenAreasAmong(ctx context.Context, name string, region uint64, areas []uint64) ([]uint64, error) {
	runs := areaRuns(areas)
	if len(runs) > maxAreaRuns {
		all, err := d.WrittenAreas(ctx, name, region)
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(all, func(a uint64) bool { _, asked := slices.BinarySearch(areas, a); return !asked }), nil
	}
	var written []uint64
	for _, r := range runs {
		out, err := d.message(ctx, name, fmt.Sprintf("@stats_print %d %d %d", region, r.first, r.count))
		if err != nil {
			return nil, err
		}
		lines, err := parseWrittenLines(out)
		if err != nil {
			return nil, err
		}
		for i, w := range lines {
			if w {
				written = append(written, r.first+uint64(i))
			}
		}
	}
	return written, nil
}

// areaRun is count consecutive areas from first.
type areaRun struct{ first, count uint64 }

// areaRuns groups sorted areas into runs of consecutive ones.
func areaRuns(areas []uint64) []areaRun {
	var runs []areaRun
	for _, a := range areas {
		n := len(runs)
		switch {
		case n > 0 && runs[n-1].first+runs[n-1].count == a:
			runs[n-1].count++
		case n > 0 && runs[n-1].first+runs[n-1].count > a: // a repeat
		default:
			runs = append(runs, areaRun{first: a, count: 1})
		}
	}
	return runs
}

func (d *Dmsetup) Untrack(ctx context.Context, name string, region uint64) error {
	_, err := d.message(ctx, name, fmt.Sprintf("@stats_delete %d", region))
	return err
}

// parseStatsList returns the regions of "@stats_list" lines,
// "<region_id>: <start>+<length> <step> <program_id> <aux_data>", by ID.
func parseStatsList(out string) map[uint64]statsRegion {
	regions := map[uint64]statsRegion{}
	for _, line := range strings.Split(out, "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if step, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			regions[n] = statsRegion{areaSectors: step}
		}
	}
	return regions
}

// ParseWrittenAreas returns the indexes of the areas of a region starting
// at sector 0 that completed a write, from "@stats_print".
func ParseWrittenAreas(out string) ([]uint64, error) { return parseAreas(out, 5, 7) }

// parseAreas reads "@stats_print" output, one line per area:
// "<start>+<length>" and then the counters of /proc/diskstats (reads
// completed, merged, sectors read, ms reading, writes completed, merged,
// sectors written, ...), and returns the areas where the counter at field
// ios or sectors is not zero. A region has up to MaxTrackedAreas lines, so
// lines are scanned in place: no string is allocated per line or field.
func parseAreas(out string, ios, sectors int) ([]uint64, error) {
	var areas []uint64
	var areaLen uint64
	err := scanAreas(out, ios, sectors, func(start, length uint64, counted bool) {
		if areaLen == 0 {
			areaLen = length // every area but a shorter last one has the first's length
		}
		if counted {
			areas = append(areas, start/areaLen)
		}
	})
	return areas, err
}

// parseWrittenLines tells, line by line, which areas of "@stats_print"
// output (a part of a region: "@stats_print <region> <first> <lines>")
// completed a write.
func parseWrittenLines(out string) ([]bool, error) {
	var written []bool
	err := scanAreas(out, 5, 7, func(_, _ uint64, counted bool) { written = append(written, counted) })
	return written, err
}

// scanAreas calls visit with each line's area and whether its counter at
// field ios or sectors is not zero.
func scanAreas(out string, ios, sectors int, visit func(start, length uint64, counted bool)) error {
	var f [areaFields]string
	for rest := strings.TrimSpace(out); rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		count := leadingFields(line, &f)
		if count == 0 {
			continue
		}
		if count < areaFields {
			return fmt.Errorf("dm-stats line %q: want <start>+<length> and at least 7 counters", line)
		}
		start, length, ok := strings.Cut(f[0], "+")
		s, err1 := strconv.ParseUint(start, 10, 64)
		n, err2 := strconv.ParseUint(length, 10, 64)
		if !ok || err1 != nil || err2 != nil || n == 0 {
			return fmt.Errorf("dm-stats line %q: area %q is not <start>+<length>", line, f[0])
		}
		visit(s, n, f[ios] != "0" || f[sectors] != "0")
	}
	return nil
}

// areaFields is how many leading fields of a "@stats_print" line
// parseAreas reads: the area and the counters up to sectors written.
const areaFields = 8

// leadingFields stores up to len(f) space-separated fields of line in f,
// as substrings of line, and returns how many it found.
func leadingFields(line string, f *[areaFields]string) int {
	n, i := 0, 0
	for n < len(f) {
		for i < len(line) && isFieldSpace(line[i]) {
			i++
		}
		if i == len(line) {
			break
		}
		j := i
		for j < len(line) && !isFieldSpace(line[j]) {
			j++
		}
		f[n], i = line[i:j], j
		n++
	}
	return n
}

func isFieldSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }
