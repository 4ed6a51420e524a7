package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// Dashboard is the part of a Grafana dashboard's JSON that says what its
// panels show and where.
type Dashboard struct {
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is one graph of a dashboard.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string   `json:"unit"`
			Min  *float64 `json:"min"`
			Max  *float64 `json:"max"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []Target `json:"targets"`
}

// Target is one query of a panel.
type Target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// Variable is a dashboard variable; only "All" is chosen, as a dashboard
// opened fresh shows it.
type Variable struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	AllValue string `json:"allValue"`
}

// Parse reads a dashboard's JSON.
func Parse(data []byte) (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return d, fmt.Errorf("dashboard: %w", err)
	}
	if len(d.Panels) == 0 {
		return d, fmt.Errorf("dashboard %q: no panels", d.Title)
	}
	for _, p := range d.Panels {
		if g := p.GridPos; g.X < 0 || g.Y < 0 || g.W < 1 || g.H < 1 || g.X+g.W > gridColumns {
			return d, fmt.Errorf("dashboard %q: panel %q: gridPos %+v: want w and h of at least 1 and x+w within %d columns", d.Title, p.Title, g, gridColumns)
		}
	}
	return d, nil
}

// Shown is what one panel shows: a line per series its queries returned
// at every Step, and the queries that failed.
type Shown struct {
	Panel  Panel
	Lines  []Line
	Errors []string
	Step   time.Duration
}

// Line is one series of a panel, named as Grafana names it.
type Line struct {
	Legend string
	Points []promql.FPoint
}

// maxPoints is about as many points as Grafana asks for across a panel.
const maxPoints = 600

// Evaluate runs every panel's queries over span, each a range query with
// the step and $__rate_interval Grafana would choose for it.
func Evaluate(ctx context.Context, d Dashboard, q storage.Queryable, span Span) ([]Shown, error) {
	step := stepFor(span)
	vars, err := variables(d, step, span)
	if err != nil {
		return nil, err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute,
		NoStepSubqueryIntervalFn: func(int64) int64 { return step.Milliseconds() }})
	var out []Shown
	for _, p := range d.Panels {
		s := Shown{Panel: p, Step: step}
		for _, t := range p.Targets {
			lines, err := rangeQuery(ctx, engine, q, expand(t.Expr, vars), t.LegendFormat, span, step)
			if err != nil {
				s.Errors = append(s.Errors, err.Error())
			}
			s.Lines = append(s.Lines, lines...)
		}
		out = append(out, s)
	}
	return out, nil
}

// stepFor is Grafana's $__interval: the span over maxPoints, at least the
// scrape interval, in whole seconds.
func stepFor(span Span) time.Duration {
	step := max(span.Last.Sub(span.First)/maxPoints, span.Interval, time.Second)
	return step.Round(time.Second)
}

// variables fills in Grafana's own variables and the dashboard's, each of
// the latter as its "All" value. $__rate_interval is Grafana's rule:
// max($__interval + scrape interval, 4 × scrape interval).
func variables(d Dashboard, step time.Duration, span Span) (map[string]string, error) {
	scrape := max(span.Interval, time.Second)
	vars := map[string]string{
		"__interval":      model.Duration(step).String(),
		"__rate_interval": model.Duration(max(step+scrape, 4*scrape)).String(),
		"__range":         model.Duration(span.Last.Sub(span.First).Round(time.Second)).String(),
	}
	for _, v := range d.Templating.List {
		switch {
		case v.Type == "datasource":
			vars[v.Name] = "prometheus"
		case v.AllValue != "":
			vars[v.Name] = v.AllValue
		default:
			return nil, fmt.Errorf("dashboard variable %q (type %q) has no allValue; only variables shown as All can be drawn", v.Name, v.Type)
		}
	}
	return vars, nil
}

var variableRef = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expand replaces $name and ${name}; an unknown variable is left as it is,
// so the query fails and the panel says which.
func expand(expr string, vars map[string]string) string {
	return variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		if v, ok := vars[m[1]+m[2]]; ok {
			return v
		}
		return ref
	})
}

func rangeQuery(ctx context.Context, engine *promql.Engine, q storage.Queryable, expr, legend string, span Span, step time.Duration) ([]Line, error) {
	qry, err := engine.NewRangeQuery(ctx, q, nil, expr, span.First, span.Last, step)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	defer qry.Close()
	matrix, err := qry.Exec(ctx).Matrix()
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	var lines []Line
	for _, s := range matrix {
		if len(s.Floats) > 0 {
			// Close hands the result's points back to the engine's pool.
			lines = append(lines, Line{Legend: legendOf(legend, s.Metric), Points: slices.Clone(s.Floats)})
		}
	}
	slices.SortFunc(lines, func(a, b Line) int { return strings.Compare(a.Legend, b.Legend) })
	return lines, nil
}

var legendRef = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legendOf names a series as Grafana does: the legend format with each
// {{label}} replaced, or without a format the metric name and its labels.
func legendOf(format string, ls labels.Labels) string {
	if format == "" {
		name, rest := ls.Get(labels.MetricName), ls.DropMetricName()
		if rest.IsEmpty() {
			return name
		}
		return name + rest.String()
	}
	return strings.TrimSpace(legendRef.ReplaceAllStringFunc(format, func(ref string) string {
		return ls.Get(legendRef.FindStringSubmatch(ref)[1])
	}))
}
