package guest

import (
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/ssdcache/ssdcache/test/csisanity"
)

// TestRealSanity runs the CSI conformance suite against the real plugin:
// real LVM volumes, dm devices, mkfs and mounts. Its volumes are uncached to
// keep the suite inside its time budget under emulation; staging with a
// cache, repeated and crashed, is what the crash and online tests do.
func TestRealSanity(t *testing.T) {
	e := guestEnv(t)
	p := startPlugin(t, e)
	sanity.Test(t, csisanity.Config("unix://"+p.socket, filepath.Join(e.work, "sanity"), 64<<20, nil))
}
