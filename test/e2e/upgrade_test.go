package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// helmUpgrade: `helm upgrade` to a new image tag while the cached volume is
// in use. The node plugin and the controller roll to it; the volume keeps
// serving and keeps its cache throughout. The new tag names the same image
// (tagged on the node): what is tested is the rollout, not a change of code.
func (s *suite) helmUpgrade(ctx context.Context, t *testing.T) {
	i := strings.LastIndex(s.images.project, ":")
	newTag := s.images.project[i+1:] + "-upgrade"
	s.node(ctx, t, "ctr -n k8s.io images tag --force "+s.images.project+" "+s.images.project[:i]+":"+newTag)
	handle := s.volumeHandle(ctx, t, "cached-data")
	if _, err := s.c.Helm(ctx, "upgrade", release, filepath.Join(s.repo, "charts", "ssdcache"), "--namespace", namespace,
		"--reuse-values", "--set", "image.tag="+newTag, timeoutFlag(ctx)); err != nil {
		t.Fatalf("%v\n%s", err, s.explain(ctx, object{ns: namespace}))
	}
	s.waitRollout(ctx, t, object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector})
	s.waitRollout(ctx, t, object{ns: namespace, name: "deployment/" + release + "-controller", pods: "app.kubernetes.io/component=controller"})
	for _, pods := range []string{nodeSelector, "app.kubernetes.io/component=controller"} {
		images := s.kubectl(ctx, t, "-n", namespace, "get", "pods", "-l", pods, "-o", "jsonpath={.items[*].spec.containers[*].image}")
		if !strings.Contains(images, ":"+newTag) {
			t.Fatalf("pods %s run %s after the upgrade, want the tag %s", pods, images, newTag)
		}
	}
	s.exec(ctx, t, "cached-data", "head -c 4M /dev/urandom > /data/after-upgrade && sync && cd /data && sha256sum -c --quiet SUMS")
	s.waitTable(ctx, t, handle, cachedTable, "a writethrough cache table after the upgrade")
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/cached-data"})
}
