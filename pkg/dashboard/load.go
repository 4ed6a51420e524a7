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
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/ssdcache/ssdcache/pkg/dashboard/scrapelog"
)

// Span is the time a log covers and how often it was scraped.
type Span struct {
	First, Last time.Time
	// Scrapes is how many scrapes the log holds; Interval is the median
	// time between two of them.
	Scrapes  int
	Interval time.Duration
	// Failed scrapes were logged as failed or could not be read (a write
	// cut short); Skipped entries had no time or one not after the entry
	// before, and were left out.
	Failed, Skipped int
}

// Load appends every sample of a scrape log (scrapelog.Recorder) to app,
// stamped with its scrape's time, and commits. Histograms and summaries
// become the series Prometheus stores for them (_bucket with le, _sum,
// _count). As in Prometheus, a series missing from a scrape, and every
// series at a failed scrape, is marked stale there, so no panel draws a
// line across a restart. Only a log without one good scrape is an error.
func Load(log io.Reader, app storage.Appender) (Span, error) {
	l := loader{app: app, live: map[string]labels.Labels{}}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if err := l.line(sc.Text()); err != nil {
			return Span{}, err
		}
	}
	if err := sc.Err(); err != nil {
		return Span{}, err
	}
	if err := l.flush(); err != nil {
		return Span{}, err
	}
	if len(l.times) == 0 {
		return Span{}, fmt.Errorf("scrape log: no readable scrape in it (%d failed, %d skipped)", l.failed, l.skipped)
	}
	span := spanOf(l.times)
	span.Failed, span.Skipped = l.failed, l.skipped
	return span, app.Commit()
}

// loader reads a log line by line: a marker line starts an entry, which
// the next marker or the end of the log completes.
type loader struct {
	app storage.Appender
	// at is the entry being read (0: none, or one to skip) and block its text.
	at    int64
	block bytes.Buffer
	// last is the newest entry's time, times the good scrapes' times.
	last  int64
	times []int64
	// live are the series of the last good scrape, by their label string.
	live map[string]labels.Labels
	// failed and skipped count entries as Span does.
	failed, skipped int
}

func (l *loader) line(line string) error {
	rest, isMarker := strings.CutPrefix(line, scrapelog.Marker)
	if !isMarker {
		if l.at != 0 {
			l.block.WriteString(line + "\n")
		}
		return nil
	}
	if err := l.flush(); err != nil {
		return err
	}
	stamp, _, failed := strings.Cut(rest, scrapelog.FailedMarker)
	ms, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil || ms <= l.last {
		l.skipped++
		return nil
	}
	l.last = ms
	if failed {
		l.failed++
		return l.stale(ms, map[string]labels.Labels{})
	}
	l.at = ms
	return nil
}

// flush appends the entry read so far; one that cannot be read counts as a
// failed scrape.
func (l *loader) flush() error {
	if l.at == 0 {
		return nil
	}
	at := l.at
	l.at = 0
	defer l.block.Reset()
	samples, err := parseScrape(l.block.Bytes())
	if err != nil {
		l.failed++
		return l.stale(at, map[string]labels.Labels{})
	}
	seen := map[string]labels.Labels{}
	for _, s := range samples {
		if _, err := l.app.Append(0, s.labels, at, s.value); err != nil {
			return fmt.Errorf("scrape at %s: series %s: %w", time.UnixMilli(at).UTC().Format(time.RFC3339), s.labels, err)
		}
		seen[s.labels.String()] = s.labels
	}
	l.times = append(l.times, at)
	return l.stale(at, seen)
}

// stale marks the live series that seen lacks stale at ms, and makes seen
// the live series.
func (l *loader) stale(ms int64, seen map[string]labels.Labels) error {
	for key, ls := range l.live {
		if _, ok := seen[key]; ok {
			continue
		}
		if _, err := l.app.Append(0, ls, ms, math.Float64frombits(value.StaleNaN)); err != nil {
			return fmt.Errorf("marking %s stale: %w", ls, err)
		}
	}
	l.live = seen
	return nil
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

// parseScrape reads one scrape's text exposition into samples.
func parseScrape(text []byte) ([]sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out []sample
	for name, f := range families {
		for _, m := range f.GetMetric() {
			out = append(out, samplesOf(name, f.GetType(), m)...)
		}
	}
	return out, nil
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
		for k, val := range base {
			ls[k] = val
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
