// Package bench runs the repeated-run convergence benchmark: CrystalDiskMark's
// matrix through fio, on several targets side by side, and reports each run's
// throughput as a fraction of the raw SSD measured in the same invocation.
package bench

import (
	"fmt"
	"sort"
	"strings"
)

// Direction is the I/O direction of a test.
type Direction string

const (
	Read  Direction = "read"
	Write Direction = "write"
)

// Test is one cell of CrystalDiskMark's matrix. Every test is T1 (one fio job).
type Test struct {
	// ID is the stable, flag- and file-friendly name, e.g. "seq1m-q8t1-read".
	ID string `json:"id"`
	// Label is CrystalDiskMark's name, e.g. "SEQ1M Q8T1 read".
	Label      string    `json:"label"`
	Random     bool      `json:"random"`
	BlockSize  int64     `json:"blockSizeBytes"`
	QueueDepth int       `json:"queueDepth"`
	Direction  Direction `json:"direction"`
	// Tree tests read the files of a tree in a directory target (TreeTest).
	Tree bool `json:"tree,omitempty"`
	// Scattered tests read a hot set spread over the whole target
	// (ScatteredTest).
	Scattered bool `json:"scattered,omitempty"`
}

// FioRW is the value of fio's rw= option for this test.
func (t Test) FioRW() string {
	prefix := ""
	if t.Random {
		prefix = "rand"
	}
	return prefix + string(t.Direction)
}

// Matrix returns CrystalDiskMark's eight tests in its order: reads first, then
// writes, so a run's reads are not disturbed by its own writes.
func Matrix() []Test {
	shapes := []struct {
		name   string
		random bool
		bs     int64
		qd     int
	}{
		{"SEQ1M Q8T1", false, 1 << 20, 8},
		{"SEQ1M Q1T1", false, 1 << 20, 1},
		{"RND4K Q32T1", true, 4 << 10, 32},
		{"RND4K Q1T1", true, 4 << 10, 1},
	}
	var tests []Test
	for _, dir := range []Direction{Read, Write} {
		for _, s := range shapes {
			tests = append(tests, Test{
				ID:         strings.ToLower(strings.ReplaceAll(s.name, " ", "-")) + "-" + string(dir),
				Label:      s.name + " " + string(dir),
				Random:     s.random,
				BlockSize:  s.bs,
				QueueDepth: s.qd,
				Direction:  dir,
			})
		}
	}
	return tests
}

// selectable are the tests -tests accepts: the matrix, then the tree test
// and the scattered test, which only an explicit ID selects.
func selectable() []Test { return append(Matrix(), TreeTest, ScatteredTest) }

// TestIDs lists the IDs of every test, for help texts and error messages.
func TestIDs() []string {
	var ids []string
	for _, t := range selectable() {
		ids = append(ids, t.ID)
	}
	return ids
}

// SelectTests resolves test IDs (or the shorthands "all", "read", "write",
// which mean the matrix's) to tests in matrix order, without duplicates.
func SelectTests(ids []string) ([]Test, error) {
	want := map[string]bool{}
	for _, id := range ids {
		id = strings.ToLower(strings.TrimSpace(id))
		matched := false
		for _, t := range selectable() {
			if id == t.ID || !t.Tree && !t.Scattered && (id == "all" || id == string(t.Direction)) {
				want[t.ID] = true
				matched = true
			}
		}
		if !matched {
			allowed := append([]string{"all", "read", "write"}, TestIDs()...)
			sort.Strings(allowed[3:])
			return nil, fmt.Errorf("tests: unknown test %q; allowed: %s", id, strings.Join(allowed, ", "))
		}
	}
	var out []Test
	for _, t := range selectable() {
		if want[t.ID] {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tests: no test selected; allowed: all, read, write, %s", strings.Join(TestIDs(), ", "))
	}
	return out, nil
}
