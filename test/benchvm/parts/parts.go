// Package parts holds what make bench's guest hands its host beside each
// ssdcache-bench invocation's report, and reads such a report back (make
// demo's host reads its own with it too).
package parts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// Part names: the guest writes each ssdcache-bench invocation's report
// into its part's directory, the host collects and merges them by name.
const (
	Writes = "writes"
	Tree   = "tree"
	// The parts measured after a working set's restage, plugin restart
	// and reboot are its part's name with these suffixes.
	RestagedSuffix  = "-restage"
	RestartedSuffix = "-restart"
	RebootedSuffix  = "-reboot"
)

// Repeat names the nth time a step was done and measured: the first under
// part's own name, the later ones as "<part>-<n>".
func Repeat(part string, n int) string {
	if n <= 1 {
		return part
	}
	return fmt.Sprintf("%s-%d", part, n)
}

// WorkingSet names the part of a working set of cold caches: "50%" is "ws-50".
func WorkingSet(ws string) string { return "ws-" + strings.TrimSuffix(ws, "%") }

// MetricsLog is the scrape log of ssdcache-node's /metrics over the whole
// run (pkg/dashboard's Recorder), beside the node's log.
const MetricsLog = "node-metrics.log"

// RestageFile is the file of a restaged part's figures, beside its report.
const RestageFile = "restage.json"

// Restage is how one cache was taken down and brought up again.
type Restage struct {
	Target string `json:"target"`
	// DownSeconds took it down (ssdcache: NodeUnpublish and NodeUnstage,
	// its hot set saved); UpSeconds brought it up (ssdcache: NodeStage and
	// NodePublish, the new cache filled from the hot set).
	DownSeconds float64 `json:"downSeconds"`
	UpSeconds   float64 `json:"upSeconds"`
	// WarmBytes is what the new cache's warm-up copied from the origin: the
	// hot set, or 0 when the cache kept its blocks (ssdcache after a clean
	// restage, lvmcache and bcache always).
	WarmBytes int64 `json:"warmBytes,omitempty"`
	// WarmUpSeconds is the plugin's own account of the warm-up (copying the
	// hot set and mapping it, or mapping what the cache kept, without
	// creating the cache's LVs): the duration of its log line.
	WarmUpSeconds float64 `json:"warmUpSeconds,omitempty"`
	// HotSetBytes is the hot set the plugin had saved when the cache came
	// up (ssdcache only), which WarmBytes is judged against.
	HotSetBytes int64 `json:"hotSetBytes,omitempty"`
}

// WriteRestage writes a part's restage figures into dir.
func WriteRestage(dir string, figures []Restage) error {
	data, err := json.MarshalIndent(figures, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, RestageFile), data, 0o644)
}

// ReadRestage reads a part's restage figures; none when the part has no file.
func ReadRestage(dir string) ([]Restage, error) {
	data, err := os.ReadFile(filepath.Join(dir, RestageFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var figures []Restage
	return figures, json.Unmarshal(data, &figures)
}

// The kinds of the reboot step, for ssdcache: both stop ssdcache-node with
// SIGTERM first (a node's shutdown stops its pods; kubelet unstages
// nothing).
const (
	// PowerCut powers the VM off with ssdcache's device still up, as a
	// power loss does: its cache is not trusted after the reboot and is
	// filled from the hot set (safety rule 2).
	PowerCut = "power-cut"
	// CleanReboot unmounts what is mounted from ssdcache's device and
	// removes the device before the power-off, as systemd-shutdown does at
	// a clean reboot: dm-cache commits its metadata clean, and a cache the
	// plugin marked at SIGTERM is kept.
	CleanReboot = "clean"
)

// CheckRebootKind refuses a -reboot-kind that is neither kind.
func CheckRebootKind(kind string) error {
	if kind != PowerCut && kind != CleanReboot {
		return fmt.Errorf("reboot-kind %q: allowed: %s (ssdcache's device left up at the power-off) or %s (the device removed first, as a clean shutdown does)", kind, PowerCut, CleanReboot)
	}
	return nil
}

// RebootFile is the reboot part's account of the power-off, beside its
// report.
const RebootFile = "reboot.json"

// Reboot is how the VM went down for the reboot step.
type Reboot struct {
	Kind string `json:"kind"`
	// Marked: ssdcache-node tagged the volume's cache for a clean shutdown
	// at SIGTERM (pkg/cache, MarkCleanShutdown); without the mark even a
	// clean removal leaves the cache to be filled from the hot set.
	Marked bool `json:"marked"`
}

// WriteReboot writes the reboot part's account into dir.
func WriteReboot(dir string, r Reboot) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, RebootFile), data, 0o644)
}

// ReadReboot reads the reboot part's account; a part without one was made
// before the kinds existed, when every reboot step was a power cut.
func ReadReboot(dir string) (Reboot, error) {
	data, err := os.ReadFile(filepath.Join(dir, RebootFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Reboot{Kind: PowerCut}, nil
	}
	if err != nil {
		return Reboot{}, err
	}
	var r Reboot
	if err := json.Unmarshal(data, &r); err != nil {
		return Reboot{}, fmt.Errorf("%s: %w", filepath.Join(dir, RebootFile), err)
	}
	return r, CheckRebootKind(r.Kind)
}

// ReadReport reads the report.json an ssdcache-bench invocation wrote into dir.
func ReadReport(dir string) (*bench.Report, error) {
	path := filepath.Join(dir, bench.ReportJSON)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r bench.Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// OriginFile is a cold part's account of ssdcache's origin, beside its
// report.
const OriginFile = "origin.json"

// Origin is what ssdcache's volume read from its HDD-backed origin LV over
// a part's runs (the block layer's counter of the origin device): the
// passes' misses and every copy the plugin made into the cache.
type Origin struct {
	Device    string `json:"device"`
	ReadBytes int64  `json:"readBytes"`
	// BlockBytes is the cache's block size, which the node's log counts
	// promotions in.
	BlockBytes int64 `json:"blockBytes"`
}

// WriteOrigin writes a part's origin figures into dir.
func WriteOrigin(dir string, o Origin) error {
	data, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, OriginFile), data, 0o644)
}

// ReadOrigin reads a part's origin figures; ok is false when the part has
// none (runs made before they were recorded, parts without ssdcache).
func ReadOrigin(dir string) (o Origin, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, OriginFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Origin{}, false, nil
	}
	if err != nil {
		return Origin{}, false, err
	}
	return o, true, json.Unmarshal(data, &o)
}
