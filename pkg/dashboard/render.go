package dashboard

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/prometheus/tsdb"
)

// Render loads a scrape log into a TSDB in dir (an empty directory the
// caller owns and removes), evaluates d's panels over the whole log and
// draws them into w with marks. It returns what each panel showed, for a caller to
// report panels without data.
func Render(ctx context.Context, d Dashboard, log io.Reader, dir string, w io.Writer, f Format, marks []Mark) ([]Shown, Span, error) {
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return nil, Span{}, fmt.Errorf("opening a TSDB in %s: %w", dir, err)
	}
	defer db.Close()
	span, err := Load(log, db.Appender(ctx))
	if err != nil {
		return nil, span, err
	}
	shown, err := Evaluate(ctx, d, db, span)
	if err != nil {
		return nil, span, err
	}
	return shown, span, Draw(w, shown, span, f, marks)
}
