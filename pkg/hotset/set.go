// Package hotset keeps, per volume, the origin ranges its cache held (its
// hot set), so that a cache created later can be filled with them before
// reads arrive. A hot set is only a hint: every warmed byte is copied from
// the origin again, so a stale or partial set costs time, never correctness.
package hotset

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Run is a range of origin sectors.
type Run struct {
	Start, Length uint64
}

// Set is a volume's hot set: sorted, disjoint, non-adjacent runs of origin
// sectors. Sectors, not cache blocks, so that a cache of another block size
// (a resize) can use it.
type Set struct {
	Runs []Run
}

// FromBlocks builds the set of the given origin blocks of blockSectors each.
func FromBlocks(blocks []uint64, blockSectors uint64) Set {
	sorted := slices.Clone(blocks)
	slices.Sort(sorted)
	var s Set
	for _, b := range slices.Compact(sorted) {
		s.add(Run{Start: b * blockSectors, Length: blockSectors})
	}
	return s
}

// add appends r, which starts at or after every run already in s.
func (s *Set) add(r Run) {
	if n := len(s.Runs); n > 0 && s.Runs[n-1].Start+s.Runs[n-1].Length >= r.Start {
		last := &s.Runs[n-1]
		last.Length = max(last.Length, r.Start+r.Length-last.Start)
		return
	}
	s.Runs = append(s.Runs, r)
}

// Sectors is the number of origin sectors in the set.
func (s Set) Sectors() uint64 {
	var n uint64
	for _, r := range s.Runs {
		n += r.Length
	}
	return n
}

// Blocks lists, in origin order, the blocks of blockSectors that hold any
// sector of the set and lie wholly within an origin of originSectors (dm-cache
// caches no partial last block), at most limit of them.
func (s Set) Blocks(blockSectors, originSectors, limit uint64) []uint64 {
	var blocks []uint64
	whole := originSectors / blockSectors
	next := uint64(0) // first block not listed yet
	for _, r := range s.Runs {
		first, last := r.Start/blockSectors, (r.Start+r.Length-1)/blockSectors
		for b := max(first, next); b <= last && b < whole; b++ {
			if uint64(len(blocks)) == limit {
				return blocks
			}
			blocks = append(blocks, b)
		}
		next = max(next, last+1)
	}
	return blocks
}

// header starts every encoded set, naming the format.
const header = "ssdcache-hotset v1 sectors"

// Encode writes s as text: the header, then "<start> <length>" per run.
func (s Set) Encode() []byte {
	var b bytes.Buffer
	b.WriteString(header + "\n")
	for _, r := range s.Runs {
		fmt.Fprintf(&b, "%d %d\n", r.Start, r.Length)
	}
	return b.Bytes()
}

// Decode reads a set written by Encode, checking that its runs are sorted
// and disjoint.
func Decode(data []byte) (Set, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != header {
		return Set{}, fmt.Errorf("hot set: first line must be %q", header)
	}
	var s Set
	for line := 2; sc.Scan(); line++ {
		start, length, ok := strings.Cut(sc.Text(), " ")
		r, err := parseRun(start, length, ok)
		if err != nil {
			return Set{}, fmt.Errorf("hot set line %d %q: %w", line, sc.Text(), err)
		}
		if n := len(s.Runs); n > 0 && s.Runs[n-1].Start+s.Runs[n-1].Length > r.Start {
			return Set{}, fmt.Errorf("hot set line %d: run starts at sector %d, inside or before the previous run", line, r.Start)
		}
		s.add(r)
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		return Set{}, err
	}
	return s, nil
}

func parseRun(start, length string, ok bool) (Run, error) {
	if !ok {
		return Run{}, fmt.Errorf("want \"<start sector> <length>\"")
	}
	st, err := strconv.ParseUint(start, 10, 64)
	if err != nil {
		return Run{}, err
	}
	n, err := strconv.ParseUint(length, 10, 64)
	if err != nil {
		return Run{}, err
	}
	if n == 0 || st+n < st {
		return Run{}, fmt.Errorf("length must be at least 1 and the run must end before sector 2^64")
	}
	return Run{Start: st, Length: n}, nil
}
