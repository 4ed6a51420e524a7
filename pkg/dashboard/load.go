package dashboard

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// Span is the time a log covers and how often it was scraped.
type Span struct {
	First, Last time.Time
	// Scrapes is how many scrapes the log holds; Interval is the median
	// time between two of them.
	Scrapes  int
	Interval time.Duration
}

// Load appends every sample of a scrape log (Recorder) to app, stamped with
// its scrape's time, and commits. Histograms and summaries become the
// series Prometheus stores for them (_bucket with le, _sum, _count).
func Load(log io.Reader, app storage.Appender) (Span, error) {
	var times []int64
	var block bytes.Buffer
	flush := func() error {
		if len(times) == 0 {
			return nil
		}
		err := appendScrape(app, block.Bytes(), times[len(times)-1])
		block.Reset()
		return err
	}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, scrapeMarker) {
			block.WriteString(line)
			block.WriteByte('\n')
			continue
		}
		if err := flush(); err != nil {
			return Span{}, err
		}
		ms, err := strconv.ParseInt(strings.TrimPrefix(line, scrapeMarker), 10, 64)
		if err != nil || (len(times) > 0 && ms <= times[len(times)-1]) {
			return Span{}, fmt.Errorf("scrape log: line %q: want %q and Unix milliseconds after the previous scrape's", line, scrapeMarker)
		}
		times = append(times, ms)
	}
	if err := sc.Err(); err != nil {
		return Span{}, err
	}
	if err := flush(); err != nil {
		return Span{}, err
	}
	if len(times) == 0 {
		return Span{}, fmt.Errorf("scrape log: no scrape in it")
	}
	return spanOf(times), app.Commit()
}

func spanOf(times []int64) Span {
	s := Span{First: time.UnixMilli(times[0]), Last: time.UnixMilli(times[len(times)-1]), Scrapes: len(times)}
	var gaps []int64
	for i := 1; i < len(times); i++ {
		gaps = append(gaps, times[i]-times[i-1])
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		s.Interval = time.Duration(gaps[len(gaps)/2]) * time.Millisecond
	}
	return s
}

func appendScrape(app storage.Appender, text []byte, ms int64) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return fmt.Errorf("scrape at %s: %w", time.UnixMilli(ms).UTC().Format(time.RFC3339), err)
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, s := range samplesOf(name, f.GetType(), m) {
				if _, err := app.Append(0, s.labels, ms, s.value); err != nil {
					return fmt.Errorf("scrape at %s: series %s: %w", time.UnixMilli(ms).UTC().Format(time.RFC3339), s.labels, err)
				}
			}
		}
	}
	return nil
}

type sample struct {
	labels labels.Labels
	value  float64
}

// samplesOf flattens one metric of a family into the series a Prometheus
// server would store from the same scrape.
func samplesOf(name string, typ dto.MetricType, m *dto.Metric) []sample {
	base := map[string]string{}
	for _, l := range m.GetLabel() {
		base[l.GetName()] = l.GetValue()
	}
	one := func(suffix string, v float64, extra ...string) sample {
		ls := map[string]string{labels.MetricName: name + suffix}
		for k, v := range base {
			ls[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			ls[extra[i]] = extra[i+1]
		}
		return sample{labels: labels.FromMap(ls), value: v}
	}
	switch typ {
	case dto.MetricType_COUNTER:
		return []sample{one("", m.GetCounter().GetValue())}
	case dto.MetricType_GAUGE:
		return []sample{one("", m.GetGauge().GetValue())}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := []sample{one("_sum", h.GetSampleSum()), one("_count", float64(h.GetSampleCount())),
			one("_bucket", float64(h.GetSampleCount()), "le", "+Inf")}
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				out = append(out, one("_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
			}
		}
		return out
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		out := []sample{one("_sum", s.GetSampleSum()), one("_count", float64(s.GetSampleCount()))}
		for _, q := range s.GetQuantile() {
			out = append(out, one("", q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)))
		}
		return out
	default:
		return []sample{one("", m.GetUntyped().GetValue())}
	}
}
