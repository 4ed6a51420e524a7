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

// WriteFiles renders the report into dir, creating it. Each file is written
// whole or not at all (rename), so a reader never sees half a report.
func WriteFiles(dir string, r *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output dir %s: %w", dir, err)
	}
	for name, render := range map[string]func(io.Writer, *Report) error{
		ReportJSON: WriteJSON, ReportMarkdown: WriteMarkdown, ConvergenceSVG: WritePlot,
	} {
		var buf bytes.Buffer
		if err := render(&buf, r); err != nil {
			return fmt.Errorf("rendering %s: %w", name, err)
		}
		if err := writeAtomic(filepath.Join(dir, name), buf.Bytes()); err != nil {
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
