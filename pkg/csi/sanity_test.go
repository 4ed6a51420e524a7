package csi_test

import (
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/ssdcache/ssdcache/test/csisanity"
)

// TestSanity runs the CSI spec's conformance suite in process against the
// driver on a unix socket, with the OS layers faked. Every volume gets a
// read cache, so the cache path runs on every stage. The kernel suite runs
// the same suite on real dm-cache, LVM and filesystems.
func TestSanity(t *testing.T) {
	n := newFakeNode(t)
	n.serve(t)
	params := map[string]string{"ssdcache.io/cache-mode": "ReadCache", "ssdcache.io/cache-size": "5%"}
	sanity.Test(t, csisanity.Config(n.endpoint, t.TempDir(), 10<<30, params))
}
