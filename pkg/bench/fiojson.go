package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Measurement is what one fio job reports for the direction of its test.
type Measurement struct {
	MBps      float64 `json:"mbps"` // 10^6 bytes per second, as CrystalDiskMark reports
	IOPS      float64 `json:"iops"`
	LatP50us  float64 `json:"latP50us"` // completion latency percentiles, microseconds
	LatP99us  float64 `json:"latP99us"`
	IOBytes   int64   `json:"ioBytes"`
	RuntimeMs int64   `json:"runtimeMs"`
	// Files is how many files a tree test read (TreeTest only).
	Files int `json:"files,omitempty"`
}

// fioOutput mirrors the parts of fio's --output-format=json (fio >= 3.0) we use.
type fioOutput struct {
	Version string   `json:"fio version"`
	Jobs    []fioJob `json:"jobs"`
}

type fioJob struct {
	Name  string       `json:"jobname"`
	Error int          `json:"error"`
	Read  fioDirection `json:"read"`
	Write fioDirection `json:"write"`
}

type fioDirection struct {
	IOBytes  int64   `json:"io_bytes"`
	BwBytes  float64 `json:"bw_bytes"`
	IOPS     float64 `json:"iops"`
	Runtime  int64   `json:"runtime"`
	TotalIOs int64   `json:"total_ios"`
	ClatNs   struct {
		N           int64              `json:"N"`
		Percentiles map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// ParseFioJSON extracts the measurement of direction dir from fio's JSON output.
// fio sometimes prints warnings on stdout before the JSON document, so text
// before the first line starting with '{' is skipped. It also returns fio's
// version string.
func ParseFioJSON(out []byte, dir Direction) (Measurement, string, error) {
	start := jsonStart(out)
	if start < 0 {
		return Measurement{}, "", errors.New("fio output holds no JSON document")
	}
	var doc fioOutput
	if err := json.NewDecoder(bytes.NewReader(out[start:])).Decode(&doc); err != nil {
		return Measurement{}, "", fmt.Errorf("decoding fio JSON: %w", err)
	}
	if len(doc.Jobs) != 1 {
		return Measurement{}, doc.Version, fmt.Errorf("fio JSON has %d jobs, want exactly 1", len(doc.Jobs))
	}
	job := doc.Jobs[0]
	if job.Error != 0 {
		return Measurement{}, doc.Version, fmt.Errorf("fio job %q failed with errno %d", job.Name, job.Error)
	}
	var d fioDirection
	switch dir {
	case Read:
		d = job.Read
	case Write:
		d = job.Write
	default:
		return Measurement{}, doc.Version, fmt.Errorf("direction %q: allowed read, write", dir)
	}
	m, err := measurementOf(d)
	if err != nil {
		return Measurement{}, doc.Version, fmt.Errorf("fio job %q %s: %w", job.Name, dir, err)
	}
	return m, doc.Version, nil
}

func jsonStart(out []byte) int {
	if len(out) > 0 && out[0] == '{' {
		return 0
	}
	if i := bytes.Index(out, []byte("\n{")); i >= 0 {
		return i + 1
	}
	return -1
}

func measurementOf(d fioDirection) (Measurement, error) {
	if d.TotalIOs <= 0 || d.IOBytes <= 0 {
		return Measurement{}, errors.New("no I/O completed")
	}
	if d.BwBytes < 0 || d.IOPS < 0 || math.IsNaN(d.BwBytes) || math.IsNaN(d.IOPS) {
		return Measurement{}, fmt.Errorf("negative or NaN bandwidth %v or IOPS %v", d.BwBytes, d.IOPS)
	}
	p50, ok50 := percentile(d.ClatNs.Percentiles, 50)
	p99, ok99 := percentile(d.ClatNs.Percentiles, 99)
	if !ok50 || !ok99 {
		return Measurement{}, errors.New("clat_ns percentiles 50 and 99 missing (fio >= 3.0 with percentile_list=50:99 is needed)")
	}
	return Measurement{
		MBps:      d.BwBytes / 1e6,
		IOPS:      d.IOPS,
		LatP50us:  p50 / 1e3,
		LatP99us:  p99 / 1e3,
		IOBytes:   d.IOBytes,
		RuntimeMs: d.Runtime,
	}, nil
}

// percentile finds fio's key for p ("50.000000") by value, not by spelling.
func percentile(ps map[string]float64, p float64) (float64, bool) {
	for k, v := range ps {
		f, err := strconv.ParseFloat(k, 64)
		if err == nil && math.Abs(f-p) < 1e-9 && v >= 0 {
			return v, true
		}
	}
	return 0, false
}
