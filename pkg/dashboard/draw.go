package dashboard

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Grafana's grid: 24 columns, rows of 30 px; drawn here in points.
const (
	gridColumns = 24
	columnWidth = 60 * vg.Inch / 72
	rowHeight   = 30 * vg.Inch / 72
	// maxLegend lines are listed beside a panel; more are counted.
	maxLegend = 8
)

// Format is the picture format Draw writes.
type Format string

const (
	SVG Format = "svg"
	PNG Format = "png"
)

// Mark is a moment every panel shows as a dashed vertical line with a short
// label: in make bench, where each part of the run began.
type Mark struct {
	At    time.Time
	Label string
}

// Draw lays every shown panel out at its grid position, each a time-series
// graph over span (minutes from its start) with its legend and each line's
// last value on the right, as the dashboard's legends are set up, and the
// marks across it.
func Draw(w io.Writer, shown []Shown, span Span, f Format, marks []Mark) error {
	rows := 0
	for _, s := range shown {
		rows = max(rows, s.Panel.GridPos.Y+s.Panel.GridPos.H)
	}
	width, height := gridColumns*columnWidth, vg.Length(rows)*rowHeight
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch f {
	case SVG:
		canvas = vgsvg.New(width, height)
	case PNG:
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))}
	default:
		return fmt.Errorf("picture format %q: want %q or %q", f, SVG, PNG)
	}
	whole := draw.New(canvas)
	for _, s := range shown {
		if err := drawPanel(tile(whole, s.Panel, height), s, span, marks); err != nil {
			return fmt.Errorf("panel %q: %w", s.Panel.Title, err)
		}
	}
	_, err := canvas.WriteTo(w)
	return err
}

// tile is a panel's rectangle, with a margin; the grid counts rows from the
// top, the canvas from the bottom.
func tile(whole draw.Canvas, p Panel, height vg.Length) draw.Canvas {
	const margin = 4
	g := p.GridPos
	minX, maxX := vg.Length(g.X)*columnWidth+margin, vg.Length(g.X+g.W)*columnWidth-margin
	maxY, minY := height-vg.Length(g.Y)*rowHeight-margin, height-vg.Length(g.Y+g.H)*rowHeight+margin
	c := whole
	c.Rectangle = vg.Rectangle{Min: vg.Point{X: minX, Y: minY}, Max: vg.Point{X: maxX, Y: maxY}}
	return c
}

func drawPanel(c draw.Canvas, s Shown, span Span, marks []Mark) error {
	c.SetColor(color.Gray{Y: 200})
	c.Stroke(c.Rectangle.Path())
	unit := s.Panel.FieldConfig.Defaults.Unit
	p := plot.New()
	p.Title.Text = s.Panel.Title
	p.X.Label.Text = "minutes"
	p.Y.Tick.Marker = unitTicks(unit)
	if d := s.Panel.FieldConfig.Defaults; d.Min != nil && d.Max != nil {
		p.Y.Min, p.Y.Max = *d.Min, *d.Max
	}
	p.X.Min, p.X.Max = 0, span.Last.Sub(span.First).Minutes()
	for _, m := range marks {
		p.Add(markLine{x: m.At.Sub(span.First).Minutes(), label: m.Label})
	}
	legend := plot.NewLegend()
	legend.TextStyle.Font.Size = 7
	for i, l := range s.Lines {
		var first *plotter.Line
		for _, seg := range segments(l, span, s.Step) {
			line, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			line.Color, line.Width = paletteColor(i), vg.Points(1)
			p.Add(line)
			if first == nil {
				first = line
			}
			if len(seg) == 1 { // a line of one point draws nothing: Grafana shows a dot
				dot, err := plotter.NewScatter(seg)
				if err != nil {
					return err
				}
				dot.Color, dot.Radius, dot.Shape = paletteColor(i), vg.Points(1.5), draw.CircleGlyph{}
				p.Add(dot)
			}
		}
		if last, ok := lastValue(l); ok && first != nil && i < maxLegend {
			legend.Add(fmt.Sprintf("%s  %s", l.Legend, formatValue(unit, last)), first)
		}
	}
	split := c.Min.X + (c.Max.X-c.Min.X)*0.68
	graph, side := c, c
	graph.Max.X, side.Min.X = split, split
	p.Draw(graph)
	notes := sideNotes(s)
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(side, 0, 0, 0, -vg.Length(len(notes)+2)*9))
	for i, n := range notes {
		side.FillText(draw.TextStyle{Color: color.Gray{Y: 80}, Font: font.From(legend.TextStyle.Font, 7), XAlign: draw.XLeft, Handler: plot.DefaultTextHandler},
			vg.Point{X: side.Min.X + 4, Y: side.Max.Y - 22 - vg.Length(i)*9}, n)
	}
	return nil
}

// sideNotes are what a panel says beside its legend: no data, failed
// queries, lines left out of the legend.
func sideNotes(s Shown) []string {
	var notes []string
	if len(s.Lines) == 0 && len(s.Errors) == 0 {
		notes = append(notes, "No data")
	}
	for _, e := range s.Errors {
		notes = append(notes, "Query failed: "+truncate(e, 60))
	}
	if n := len(s.Lines) - maxLegend; n > 0 {
		notes = append(notes, fmt.Sprintf("%d more lines", n))
	}
	return notes
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// segments are a line's points in minutes from span's start, split where
// the series was absent for more than a step (stale: a restart, a reboot),
// so no line is drawn across the gap, as Grafana draws none.
func segments(l Line, span Span, step time.Duration) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	prev := int64(0)
	for _, pt := range l.Points {
		if math.IsNaN(pt.F) || math.IsInf(pt.F, 0) {
			continue
		}
		if len(cur) > 0 && time.Duration(pt.T-prev)*time.Millisecond > step*3/2 {
			out, cur = append(out, cur), nil
		}
		cur = append(cur, plotter.XY{X: float64(pt.T-span.First.UnixMilli()) / 60000, Y: pt.F})
		prev = pt.T
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// lastValue is Grafana's lastNotNull: the last value that is a number.
func lastValue(l Line) (float64, bool) {
	for i := len(l.Points) - 1; i >= 0; i-- {
		if v := l.Points[i].F; !math.IsNaN(v) && !math.IsInf(v, 0) {
			return v, true
		}
	}
	return 0, false
}

// paletteColor is line i's colour, from Grafana's classic palette.
func paletteColor(i int) color.Color {
	palette := [...]color.RGBA{
		{0x7e, 0xb2, 0x6d, 0xff}, {0xea, 0xb8, 0x39, 0xff}, {0x6e, 0xd0, 0xe0, 0xff}, {0xef, 0x84, 0x3c, 0xff},
		{0xe2, 0x4d, 0x42, 0xff}, {0x1f, 0x78, 0xc1, 0xff}, {0xba, 0x43, 0xa9, 0xff}, {0x70, 0x5d, 0xa0, 0xff},
		{0x50, 0x86, 0x42, 0xff}, {0xcc, 0xa3, 0x00, 0xff}, {0x44, 0x7e, 0xbc, 0xff}, {0xc1, 0x5c, 0x17, 0xff},
	}
	return palette[i%len(palette)]
}

// markLine draws a Mark across a panel's data area, its label at the top.
type markLine struct {
	x     float64
	label string
}

func (m markLine) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(m.x)
	if x < c.Min.X || x > c.Max.X {
		return
	}
	gray := color.Gray{Y: 150}
	c.StrokeLine2(draw.LineStyle{Color: gray, Width: vg.Points(0.5), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}, x, c.Min.Y, x, c.Max.Y)
	c.FillText(draw.TextStyle{Color: color.Gray{Y: 80}, Font: font.From(plot.DefaultFont, 6), XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler},
		vg.Point{X: x, Y: c.Max.Y}, m.label)
}

// unitTicks labels the default ticks in the panel's unit.
type unitTicks string

func (u unitTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = formatValue(string(u), ticks[i].Value)
		}
	}
	return ticks
}

// formatValue writes v in one of Grafana's units as Grafana shows it.
func formatValue(unit string, v float64) string {
	switch unit {
	case "percentunit":
		return trimFloat(v*100) + "%"
	case "bytes":
		return scaled(v, 1024, []string{"B", "KiB", "MiB", "GiB", "TiB"})
	case "Bps":
		return scaled(v, 1000, []string{"B/s", "kB/s", "MB/s", "GB/s", "TB/s"})
	case "s":
		return scaled(v*1e6, 1000, []string{"µs", "ms", "s"})
	case "iops":
		return scaled(v, 1000, []string{"io/s", "k io/s", "M io/s"})
	case "ops":
		return scaled(v, 1000, []string{"ops/s", "k ops/s", "M ops/s"})
	case "reqps":
		return scaled(v, 1000, []string{"req/s", "k req/s", "M req/s"})
	default:
		return scaled(v, 1000, []string{"", "k", "M", "G"})
	}
}

func scaled(v, base float64, names []string) string {
	i := 0
	for math.Abs(v) >= base && i < len(names)-1 {
		v /= base
		i++
	}
	return strings.TrimSpace(trimFloat(v) + " " + names[i])
}

// trimFloat keeps three significant digits, and every digit before the point.
func trimFloat(v float64) string {
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
