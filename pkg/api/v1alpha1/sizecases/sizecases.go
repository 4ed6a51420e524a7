// Package sizecases is the table of cache size strings that the size parser's
// unit test and the API test against a real kube-apiserver both read, so that
// ParseCacheSize and the CRD's validation are held to the same verdicts.
package sizecases

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed cache-sizes.txt
var table string

// Case is one line of the table.
type Case struct {
	// Size is the string under test.
	Size string
	// Bytes or Percent is what an accepted Size parses to.
	Bytes, Percent int64
	// Refused, when not empty, is part of the error a refused Size gets.
	Refused string
}

// All returns the table's cases.
func All() ([]Case, error) {
	var cases []Case
	for n, line := range strings.Split(table, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := parse(line)
		if err != nil {
			return nil, fmt.Errorf("cache-sizes.txt line %d: %w", n+1, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func parse(line string) (Case, error) {
	quoted, err := strconv.QuotedPrefix(line)
	if err != nil {
		return Case{}, err
	}
	var c Case
	c.Size, _ = strconv.Unquote(quoted)
	verdict := strings.TrimSpace(line[len(quoted):])
	kind, value, _ := strings.Cut(verdict, "=")
	switch {
	case strings.HasPrefix(verdict, "refused:"):
		c.Refused = strings.TrimPrefix(verdict, "refused:")
	case kind == "bytes":
		c.Bytes, err = strconv.ParseInt(value, 10, 64)
	case kind == "percent":
		c.Percent, err = strconv.ParseInt(value, 10, 64)
	default:
		err = fmt.Errorf("verdict %q: want bytes=N, percent=N or refused:<text>", verdict)
	}
	return c, err
}
