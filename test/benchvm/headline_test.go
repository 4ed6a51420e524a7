package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssdcache/ssdcache/pkg/bench"
	"github.com/ssdcache/ssdcache/pkg/dashboard/scrapelog"
)

// headlineReport is one 1 GiB working set of three runs: ssdcache reads
// everything from the HDD in run 1, half of its hits in run 2 come while
// its copy still reads the HDD, and run 3 is warm; the HDD reference is
// twice as fast as ssdcache's run 1.
func headlineReport() *bench.Report {
	const gib = int64(1) << 30
	hit := func(f float64) *float64 { return &f }
	r := &bench.Report{Config: bench.Config{
		Targets:      []bench.Target{{Name: "raw-hdd"}, {Name: "raw-ssd"}, {Name: "ssdcache"}},
		SSDReference: "raw-ssd", HDDReference: "raw-hdd",
		WorkingSets: []bench.WorkingSet{{Label: "1Gi", Bytes: gib}},
	}, Disks: []bench.TargetDisks{{Target: "ssdcache", Disks: []bench.Disk{
		{Name: "dm-3/ssdcache-pvc-bench", Role: bench.DiskTarget},
		{Name: "nvme0n1", Role: bench.DiskBelow},
		{Name: "sdb", Role: bench.DiskBelow, Rotational: true}}}}}
	add := func(target string, run int, mbps float64, hitRatio *float64, hddBytes int64) {
		r.Results = append(r.Results, bench.Result{WorkingSet: "1Gi", Target: target, Run: run, Test: "seq1m-q8t1-read",
			Measurement: bench.Measurement{MBps: mbps}, HitRatio: hitRatio,
			Disks: []bench.DiskFigures{{Disk: "nvme0n1", Role: bench.DiskBelow, ReadBytes: 5 * gib}, {Disk: "sdb", Role: bench.DiskBelow, ReadBytes: hddBytes}}})
	}
	add("raw-hdd", 1, 200, nil, gib)
	add("ssdcache", 1, 100, hit(0), 2*gib)
	add("ssdcache", 2, 900, hit(0.95), gib/5)
	add("ssdcache", 3, 2000, hit(1), 0)
	return r
}

func TestHeadlineNamesTheFirstRunWarmByHitRatioAndHDDBytes(t *testing.T) {
	o := options{workingSets: []string{"1Gi"}, readTests: "seq1m-q8t1-read", outputDir: t.TempDir()}
	got := headline(headlineReport(), o)
	// Run 2's hit ratio is 0.95 but it read a fifth of the set from the
	// HDD: only run 3 meets both.
	want := "| 1Gi | ssdcache | **3** | 0.50 | 2.00 0.20 0.00 | 0.00 0.95 1.00 |"
	if !strings.Contains(got, want) {
		t.Errorf("headline lacks the row\n%s\ngot:\n%s", want, got)
	}
	if !strings.HasPrefix(withHeadline("# title\n\n- rest\n", got), "# title\n\n## Headline") {
		t.Error("the headline is not right under the report's title")
	}
}

func TestPromotionsDuringCountsTheBatchesAndPeakMemoryOfThePart(t *testing.T) {
	dir := t.TempDir()
	from := time.Date(2026, 12, 5, 11, 0, 0, 0, time.UTC)
	line := func(at time.Time, promoted int, uncached, suspended string) string {
		return fmt.Sprintf(`I%s   123 promoter.go:271] "Promoted the blocks read" volumeID="pvc-bench" read=%d promoted=%d kept=0 writtenMeanwhile=0 left=0 duration="2.1s" uncached="%s"%s copiedWhileServing=true`,
			at.Format("0102 15:04:05.000000"), promoted, promoted, uncached, suspended)
	}
	nodeLog := strings.Join([]string{
		line(from.Add(-time.Minute), 99, "9s", ""),       // an earlier part's
		line(from.Add(time.Minute), 4096, "812.5ms", ""), // a log from before the metadata swap
		line(from.Add(2*time.Minute), 1024, "1.25s", ` suspended="0s"`),
		line(from.Add(150*time.Second), 1024, "0s", ` suspended="420ms"`),
		line(from.Add(3*time.Minute), 0, "5s", ` suspended="3s"`), // nothing promoted: no batch
	}, "\n")
	scrape := func(at time.Time, rss string) string {
		return fmt.Sprintf("%s%d\nprocess_resident_memory_bytes %s\n", scrapelog.Marker, at.UnixMilli(), rss)
	}
	metrics := scrape(from.Add(-time.Second), "9e9") + scrape(from.Add(time.Second), "5.24288e+07") + scrape(from.Add(time.Minute), "4e7") +
		fmt.Sprintf("%s%d%sconnection refused\n", scrapelog.Marker, from.Add(2*time.Minute).UnixMilli(), scrapelog.FailedMarker)
	for name, data := range map[string]string{"node.log": nodeLog, "metrics.log": metrics} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := promotionsDuring(filepath.Join(dir, "node.log"), filepath.Join(dir, "metrics.log"), from, from.Add(10*time.Minute))
	want := promotionFigures{batches: 3, blocks: 6144, longestUncached: 1250 * time.Millisecond, longestSuspended: 420 * time.Millisecond, peakRSS: 50 << 20}
	if p != want {
		t.Errorf("figures %+v, want %+v", p, want)
	}
}
