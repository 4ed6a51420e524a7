package e2e

import (
	"testing"
	"time"
)

func TestParseConnectLogReadsGrpcSubchannelTimes(t *testing.T) {
	logs := `2026-12-06T05:40:01.100000000Z I1206 05:40:01.099 1 csi-provisioner.go:168] "Version" version="v5.3.0"
2026-12-06T05:40:02.000000000Z INFO: 2026/12/06 05:40:02 [core] [Channel #1 SubChannel #2]Subchannel Connectivity change to CONNECTING
2026-12-06T05:40:03.200000000Z INFO: 2026/12/06 05:40:03 [core] [Channel #1 SubChannel #2]Subchannel Connectivity change to TRANSIENT_FAILURE, last error: deadline exceeded
2026-12-06T05:40:04.000000000Z INFO: 2026/12/06 05:40:04 [core] [Channel #1 SubChannel #2]Subchannel Connectivity change to CONNECTING
2026-12-06T05:40:04.250000000Z INFO: 2026/12/06 05:40:04 [core] [Channel #1 SubChannel #2]Subchannel Connectivity change to READY
not a log line
2026-12-06T05:40:09.000000000Z INFO: 2026/12/06 05:40:09 [core] [Channel #1 SubChannel #2]Subchannel Connectivity change to READY
`
	p := parseConnectLog(logs)
	if want := time.Date(2026, 12, 6, 5, 40, 1, 100000000, time.UTC); !p.firstLine.Equal(want) {
		t.Errorf("first line at %s, want %s", p.firstLine, want)
	}
	if p.attempts != 2 {
		t.Errorf("%d attempts, want 2", p.attempts)
	}
	if p.failure != "deadline exceeded" {
		t.Errorf("first failure %q, want the logged error", p.failure)
	}
	// From the first CONNECTING to the first READY: the failed attempt counts.
	if p.connect != 2250*time.Millisecond {
		t.Errorf("connect %s, want 2.25s", p.connect)
	}
}
