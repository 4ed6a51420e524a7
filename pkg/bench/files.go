package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Names of the files WriteFiles writes.
const (
	ReportJSON     = "report.json"
	ReportMarkdown = "report.md"
	ConvergenceSVG = "convergence.svg"
)

// WriteJSON writes report.json's content.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// File is one rendered report file.
type File struct {
	Name string
	Data []byte
}

// RenderFiles renders report.json, report.md and convergence.svg, in that
// order: the order in which a size-limited copy keeps them.
func RenderFiles(r *Report) ([]File, error) {
	renderers := []struct {
		name   string
		render func(io.Writer, *Report) error
	}{{ReportJSON, WriteJSON}, {ReportMarkdown, WriteMarkdown}, {ConvergenceSVG, WritePlot}}
	files := make([]File, 0, len(renderers))
	for _, f := range renderers {
		var buf bytes.Buffer
		if err := f.render(&buf, r); err != nil {
			return nil, fmt.Errorf("rendering %s: %w", f.name, err)
		}
		files = append(files, File{Name: f.name, Data: buf.Bytes()})
	}
	return files, nil
}

// WriteFiles renders the report into dir, creating it. Each file is written
// whole or not at all (rename), so a reader never sees half a report.
func WriteFiles(dir string, r *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output dir %s: %w", dir, err)
	}
	files, err := RenderFiles(r)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := writeAtomic(filepath.Join(dir, f.Name), f.Data); err != nil {
			return err
		}
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}
