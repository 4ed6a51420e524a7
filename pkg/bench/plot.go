package bench

import (
	"fmt"
	"image/color"
	"io"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotSeries names the lines WritePlot draws, in legend order: one per
// measured target and working set, then the SSD and HDD reference levels.
func PlotSeries(r *Report) []string {
	var names []string
	for _, s := range runSeries(r) {
		names = append(names, s.name)
	}
	for _, ref := range referenceLevels(r) {
		names = append(names, ref.name)
	}
	return names
}

type series struct {
	name string
	xys  plotter.XYs
	// target and workingSet index the series' target and working set, so a
	// target keeps one colour and a working set one dash pattern and marker.
	target, workingSet int
}

// runSeries is MB/s per run of the plot test, for every target that is not a
// reference, per working set.
func runSeries(r *Report) []series {
	c := r.Config
	var out []series
	for wi, ws := range c.WorkingSets {
		for ti, t := range c.Targets {
			if t.Name == c.SSDReference || t.Name == c.HDDReference {
				continue
			}
			s := series{name: fmt.Sprintf("%s, working set %s", t.Name, workingSetName(ws)), target: ti, workingSet: wi}
			for _, res := range r.Results {
				if res.WorkingSet == ws.Label && res.Target == t.Name && res.Test == c.PlotTest {
					s.xys = append(s.xys, plotter.XY{X: float64(res.Run), Y: res.MBps})
				}
			}
			if len(s.xys) > 0 {
				out = append(out, s)
			}
		}
	}
	return out
}

// workingSetName shows the size behind a percentage label.
func workingSetName(ws WorkingSet) string {
	if strings.HasSuffix(ws.Label, "%") {
		return fmt.Sprintf("%s (%s)", ws.Label, mib(ws.Bytes))
	}
	return ws.Label
}

type level struct {
	name  string
	value float64
	color color.Color
}

// referenceLevels are the medians of the reference targets over every run and
// working set of the plot test.
func referenceLevels(r *Report) []level {
	var out []level
	for _, ref := range []struct{ target, kind string }{{r.Config.SSDReference, "SSD"}, {r.Config.HDDReference, "HDD"}} {
		if ref.target == "" {
			continue
		}
		var v []float64
		for _, res := range r.Results {
			if res.Target == ref.target && res.Test == r.Config.PlotTest {
				v = append(v, res.MBps)
			}
		}
		if len(v) > 0 {
			col := color.RGBA{R: 0x20, G: 0x80, B: 0x20, A: 0xff}
			if ref.kind == "HDD" {
				col = color.RGBA{R: 0x90, G: 0x50, B: 0x10, A: 0xff}
			}
			out = append(out, level{name: fmt.Sprintf("raw %s (%s), median of all runs", ref.kind, ref.target), value: Median(v), color: col})
		}
	}
	return out
}

// WritePlot draws convergence.svg: MB/s of the plot test per run.
func WritePlot(w io.Writer, r *Report) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Convergence: %s, MB/s per run", label(r.Config.PlotTest))
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xLabel(r.Config)
	p.Y.Label.Text = "MB/s (10^6 bytes/s)"
	p.Y.Min = 0
	p.X.Min, p.X.Max = 0.5, float64(r.Config.Runs)+0.5
	p.X.Tick.Marker = runTicks(r.Config.Runs)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	runs, levels := runSeries(r), referenceLevels(r)
	p.Y.Max = yMax(runs, levels)
	for _, s := range runs {
		line, points, err := plotter.NewLinePoints(s.xys)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.name, err)
		}
		line.Color, points.Color = plotutil.Color(s.target), plotutil.Color(s.target)
		line.Dashes = plotutil.Dashes(s.workingSet)
		points.Shape = plotutil.Shape(s.workingSet)
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	for _, ref := range levels {
		line, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: ref.value}, {X: p.X.Max, Y: ref.value}})
		if err != nil {
			return fmt.Errorf("plotting %s: %w", ref.name, err)
		}
		line.Color = ref.color
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(line)
		p.Legend.Add(ref.name, line)
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "svg")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}

// xLabel says what a run is: a pass over the working set, the first one on a
// cold cache, with the pause that lets dm-cache promote in between.
func xLabel(c Config) string {
	if c.Interval > 0 {
		return fmt.Sprintf("run (pass over the working set; 1: cold cache; %s pause between runs)", c.Interval)
	}
	return "run (pass over the working set; 1: cold cache)"
}

// yMax leaves room above the data for the legend, which gonum draws inside
// the data area: about 6% of the height per legend row.
func yMax(runs []series, levels []level) float64 {
	top := 0.0
	for _, s := range runs {
		for _, xy := range s.xys {
			top = max(top, xy.Y)
		}
	}
	for _, l := range levels {
		top = max(top, l.value)
	}
	if top <= 0 {
		top = 1
	}
	return top * (1 + 0.06*float64(len(runs)+len(levels)+1))
}

// runTicks labels whole runs only; the default ticker would print 1.5.
func runTicks(runs int) plot.ConstantTicks {
	step := max(1, runs/10)
	var ticks plot.ConstantTicks
	for i := 1; i <= runs; i++ {
		t := plot.Tick{Value: float64(i)}
		if (i-1)%step == 0 {
			t.Label = fmt.Sprint(i)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
