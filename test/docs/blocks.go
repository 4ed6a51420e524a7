package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is one fenced code block of a Markdown file and its docs-test
// marker (<!-- docs-test: NAME --> on the line before it).
type Block struct {
	File, Lang, Marker, Text string
	Line                     int
}

var markerRE = regexp.MustCompile(`^<!-- docs-test: (.+) -->$`)

// CodeBlocks lists the fenced blocks of file (a path below repo) with the
// marker on the line before each ("" when there is none).
func CodeBlocks(repo, file string) ([]Block, error) {
	data, err := os.ReadFile(filepath.Join(repo, file))
	if err != nil {
		return nil, err
	}
	var out []Block
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		b := Block{File: file, Lang: lang, Line: i + 1}
		if i > 0 {
			if m := markerRE.FindStringSubmatch(lines[i-1]); m != nil {
				b.Marker = m[1]
			}
		}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		b.Text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

// Marked is file's block marked name.
func Marked(repo, file, name string) (Block, error) {
	blocks, err := CodeBlocks(repo, file)
	if err != nil {
		return Block{}, err
	}
	for _, b := range blocks {
		if b.Marker == name {
			return b, nil
		}
	}
	return Block{}, fmt.Errorf("%s has no code block marked <!-- docs-test: %s -->", file, name)
}
