package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// volumeExpansion: `kubectl patch pvc` grows the cached volume while its pod
// runs. The node agent grows the HDD LV and the PV, kubelet the cached
// device and the filesystem (NodeExpandVolume); the cache stays attached,
// the pod sees the larger filesystem and the data verify.
func (s *suite) volumeExpansion(ctx context.Context, t *testing.T) {
	// ext4 keeps a few percent for its metadata: more than 90 % of the new size shows.
	const grown, leastMiB = "768Mi", 768 * 9 / 10
	s.kubectl(ctx, t, "-n", "default", "patch", "pvc", "cached-data", "-p", `{"spec":{"resources":{"requests":{"storage":"`+grown+`"}}}}`)
	pvc := object{ns: "default", name: "pvc/cached-data"}
	s.eventually(ctx, t, "the claim's capacity to reach "+grown, pvc, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", "default", "get", "pvc", "cached-data", "-o",
			`jsonpath={.status.capacity.storage} {.status.allocatedResourceStatuses} {.status.conditions[*].type}`)
		return strings.HasPrefix(out, grown+" "), "capacity, resize status, conditions: " + out + errOrEmpty(err), nil
	})
	s.exec(ctx, t, "cached-data", fmt.Sprintf(`[ "$(df -B1M --output=size /data | tail -1)" -gt %d ] && cd /data && sha256sum -c --quiet SUMS`, leastMiB))
	s.waitTable(ctx, t, s.volumeHandle(ctx, t, "cached-data"), cachedTable, "a writethrough cache table after the expansion")
	s.eventually(ctx, t, "the resize Events on the claim", pvc, func() (bool, string, error) {
		reasons, err := s.c.Kubectl(ctx, "-n", "default", "get", "events", "--field-selector", "involvedObject.name=cached-data,involvedObject.kind=PersistentVolumeClaim", "-o", "jsonpath={.items[*].reason}")
		return strings.Contains(reasons, "Resizing") && strings.Contains(reasons, "FileSystemResizeRequired"), "reasons: " + reasons + errOrEmpty(err), nil
	})
}
