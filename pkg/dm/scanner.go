package dm

import (
	"fmt"
	"strconv"
)

// scanner walks the fields of a table or status line, remembering the first
// error so parsers read as a flat list of expected fields.
type scanner struct {
	fields []string
	pos    int
	what   string
	err    error
}

func (s *scanner) done() bool { return s.pos >= len(s.fields) }

func (s *scanner) word(name string) string {
	if s.err != nil {
		return ""
	}
	if s.done() {
		s.err = fmt.Errorf("%s: missing %s", s.what, name)
		return ""
	}
	w := s.fields[s.pos]
	s.pos++
	return w
}

func (s *scanner) uint(name string) uint64 {
	w := s.word(name)
	if s.err != nil {
		return 0
	}
	v, err := strconv.ParseUint(w, 10, 64)
	if err != nil {
		s.err = fmt.Errorf("%s: %s %q is not an unsigned integer", s.what, name, w)
	}
	return v
}

// fraction parses "<used>/<total>".
func (s *scanner) fraction(name string) (used, total uint64) {
	w := s.word(name)
	if s.err != nil {
		return 0, 0
	}
	var extra string
	n, _ := fmt.Sscanf(w+" x", "%d/%d %s", &used, &total, &extra)
	if n != 3 || used > total {
		s.err = fmt.Errorf("%s: %s %q is not <used>/<total>", s.what, name, w)
	}
	return used, total
}

func (s *scanner) devNum(name string) DevNum {
	w := s.word(name)
	if s.err != nil {
		return DevNum{}
	}
	d, err := ParseDevNum(w)
	if err != nil {
		s.err = fmt.Errorf("%s: %s: %w", s.what, name, err)
	}
	return d
}

// list parses "<count> <item>*".
func (s *scanner) list(name string) []string {
	n := s.uint(name + " count")
	if s.err != nil {
		return nil
	}
	if n > uint64(len(s.fields)-s.pos) {
		s.err = fmt.Errorf("%s: %s count %d exceeds the %d remaining fields", s.what, name, n, len(s.fields)-s.pos)
		return nil
	}
	var items []string
	for i := uint64(0); i < n; i++ {
		items = append(items, s.word(name))
	}
	return items
}
