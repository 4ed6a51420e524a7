package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// klogTime is the time in the header of a klog line:
// `I1201 02:29:50.653439       1 driver.go:150] "CSI request done" method="..." duration="1.2s"`.
var klogTime = regexp.MustCompile(`^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)

// klogValue is the value of key="value" in a klog line ("" if absent).
func klogValue(line, key string) string {
	_, rest, found := strings.Cut(line, " "+key+`="`)
	value, _, closed := strings.Cut(rest, `"`)
	if !found || !closed {
		return ""
	}
	return value
}

// stageToCacheLive reads the node plugin's log: how long NodeStageVolume of
// volume took, and how long after it returned the node agent's attach of
// its cache was done (the cache live).
func stageToCacheLive(logs, volume string) (stage, gap time.Duration, err error) {
	var stageDone, live time.Time
	for _, line := range strings.Split(logs, "\n") {
		if klogValue(line, "volumeID") != volume {
			continue
		}
		m := klogTime.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse("0102 15:04:05.000000", m[1])
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(line, `"CSI request done"`) && klogValue(line, "method") == "/csi.v1.Node/NodeStageVolume" && stageDone.IsZero():
			stageDone = at
			if stage, err = time.ParseDuration(klogValue(line, "duration")); err != nil {
				return 0, 0, fmt.Errorf("NodeStageVolume line %q: %w", line, err)
			}
		case strings.Contains(line, `"Changed volume"`) && klogValue(line, "operation") == "attach" && !stageDone.IsZero() && live.IsZero():
			live = at
		}
	}
	if stageDone.IsZero() || live.IsZero() {
		return 0, 0, fmt.Errorf("the log has no NodeStageVolume of %s followed by an attach of its cache", volume)
	}
	return stage, live.Sub(stageDone), nil
}

// logStageToCacheLive reports, never judges, the time from NodeStage
// returning to the cache being live, beside the stage time: timings are for
// benchmarks, this VM is emulated.
func (s *suite) logStageToCacheLive(ctx context.Context, t *testing.T, volume string) {
	t.Helper()
	logs, err := s.c.Kubectl(ctx, "-n", namespace, "logs", "-l", nodeSelector, "-c", pluginContainer, "--tail=-1")
	if err != nil {
		t.Logf("stage to cache live: no plugin log: %v", err)
		return
	}
	stage, gap, err := stageToCacheLive(logs, volume)
	if err != nil {
		t.Logf("stage to cache live: %v", err)
		return
	}
	t.Logf("stage to cache live: NodeStageVolume took %s; the cache was live %s after it returned (%.2f of the stage time)",
		stage, gap, gap.Seconds()/stage.Seconds())
}

func TestStageToCacheLiveReadsThePluginLog(t *testing.T) {
	logs := `I1201 02:30:01.000000       1 driver.go:150] "CSI request done" method="/csi.v1.Node/NodeStageVolume" duration="4s" volumeID="other"
I1201 02:30:02.500000       1 driver.go:150] "CSI request done" method="/csi.v1.Node/NodeStageVolume" duration="2.5s" volumeID="pvc-1"
I1201 02:30:02.600000       1 engine.go:113] "Changing volume" volumeID="pvc-1" operation="attach" steps=["create-cache-lvs"]
I1201 02:30:03.700000       1 engine.go:123] "Changed volume" volumeID="pvc-1" operation="attach" duration="1.1s"
I1201 02:31:00.000000       1 engine.go:123] "Changed volume" volumeID="pvc-1" operation="attach" duration="1s"`
	stage, gap, err := stageToCacheLive(logs, "pvc-1")
	if err != nil || stage != 2500*time.Millisecond || gap != 1200*time.Millisecond {
		t.Fatalf("stage %s, gap %s, %v; want 2.5s and 1.2s", stage, gap, err)
	}
	if _, _, err := stageToCacheLive(logs, "pvc-2"); err == nil {
		t.Fatal("no error for a volume the log does not name")
	}
}
