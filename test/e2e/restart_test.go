package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// The volumes of the restart step besides the reader and cached-data: one
// whose admission is revoked and one whose cache is dropped for failing,
// both while the node plugin is down.
const (
	revokedVolume = "revoked-data"
	droppedVolume = "dropped-data"
)

// nodePluginRestart: the node plugin is stopped (its DaemonSet moved off the
// node) while four volumes are staged and cached, and started again. The new
// agent knows only what the kernel, the LV tags and the API say, and while it
// was down, with the controller stopped too:
//   - the reader's binding vanished (an admin stripped its finalizer): the
//     new agent detaches its cache, as no binding claims it;
//   - revoked-data's admission was withdrawn (its status no longer names the
//     node): the new agent detaches it, keeping what the cache held as the
//     volume's hot set, and once the controller is back and admits it anew,
//     attaches a new cache filled from that hot set (status.lastWarmup and a
//     CacheWarmed Event);
//   - dropped-data's cache was dropped for failing (linear table, Degraded
//     condition of the binding's generation): the new agent keeps it dropped
//     until the binding's spec changes;
//   - cached-data keeps its cache throughout.
//
// The volumes keep serving reads and writes.
func (s *suite) nodePluginRestart(ctx context.Context, t *testing.T) {
	s.startBoundVolumes(ctx, t, revokedVolume, droppedVolume)
	s.apply(ctx, t, cacheBinding(reader, cacheSize))
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/" + reader})
	orphan, revoked, dropped := s.volumeHandle(ctx, t, reader), s.volumeHandle(ctx, t, revokedVolume), s.volumeHandle(ctx, t, droppedVolume)
	passes := s.readerPasses(ctx, t)
	s.readUntilCached(ctx, t, revokedVolume, revoked)

	s.stopNodePlugin(ctx, t)
	s.scaleController(ctx, t, 0)
	s.kubectl(ctx, t, "-n", "default", "patch", "cachebinding/"+reader, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	s.kubectl(ctx, t, "-n", "default", "delete", "cachebinding/"+reader, "--wait", timeoutFlag(ctx))
	s.kubectl(ctx, t, "-n", "default", "patch", "cachebinding/"+revokedVolume, "--subresource=status", "--type=merge",
		"-p", `{"status":{"nodeName":null,"volumeHandle":null,"phase":"Pending","conditions":null}}`)
	s.dropCacheByHand(ctx, t, droppedVolume, dropped)
	for _, h := range []string{orphan, revoked} {
		if table := s.dmTable(ctx, t, h); !strings.Contains(table, " cache ") {
			t.Fatalf("with the plugin down, volume %s already lost its cache: %s", h, table)
		}
	}
	s.startNodePlugin(ctx, t)

	s.waitMorePasses(ctx, t, passes, "after the plugin restart")
	s.exec(ctx, t, "cached-data", "head -c 4M /dev/urandom > /data/after-restart && sync && cd /data && sha256sum -c --quiet SUMS")
	s.waitTable(ctx, t, s.volumeHandle(ctx, t, "cached-data"), cachedTable, "the cached volume's cache table across the restart")
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/cached-data"})
	s.waitTable(ctx, t, orphan, " linear ", "the restarted agent detached the cache no binding claims")
	s.waitTable(ctx, t, revoked, " linear ", "the restarted agent detached the revoked binding's cache")

	s.scaleController(ctx, t, 1)
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/" + revokedVolume})
	s.waitTable(ctx, t, revoked, " writethrough ", "the re-admitted binding's cache is attached again")
	s.expectWarmed(ctx, t, revokedVolume)
	s.expectStillDropped(ctx, t, dropped)
	s.kubectl(ctx, t, "-n", "default", "patch", "cachebinding/"+droppedVolume, "--type=merge", "-p", `{"spec":{"size":"48Mi"}}`)
	s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/" + droppedVolume})
	s.waitTable(ctx, t, dropped, " writethrough ", "a spec change brings the dropped cache back")
	for _, pod := range []string{revokedVolume, droppedVolume} {
		s.exec(ctx, t, pod, "cd /data && sha256sum -c --quiet SUMS")
	}
}

// startBoundVolumes starts a pod on a new volume of the uncached class
// for each name, each with a CacheBinding, and waits for the caches.
func (s *suite) startBoundVolumes(ctx context.Context, t *testing.T, names ...string) {
	for _, name := range names {
		s.apply(ctx, t, pvcAndPod(name, "e2e-uncached", volumeSize, s.images.project, writeDataSet+"sleep infinity"))
		s.apply(ctx, t, cacheBinding(name, cacheSize))
	}
	for _, name := range names {
		s.waitReady(ctx, t, object{ns: "default", name: "pod/" + name})
		s.waitReady(ctx, t, object{ns: "default", name: "cachebinding/" + name})
	}
}

// dropCacheByHand does what the agent's monitor does when a cache device
// fails, while the agent is down: the volume's table becomes linear over
// its origin, and the binding's status records the drop for its generation.
func (s *suite) dropCacheByHand(ctx context.Context, t *testing.T, pvc, handle string) {
	t.Helper()
	// A cache table reads "0 <length> cache <metadata> <data> <origin> ...".
	s.node(ctx, t, fmt.Sprintf(`set -eu; d=ssdcache-%s; set -- $(dmsetup table $d)
[ "$3" = cache ]; echo "$1 $2 linear $6 0" | dmsetup load $d; dmsetup suspend $d; dmsetup resume $d`, handle))
	generation := s.jsonpath(ctx, t, "cachebinding/"+pvc, "{.metadata.generation}", "-n", "default")
	status := fmt.Sprintf(`{"status":{"phase":%q,"conditions":[{"type":%q,"status":"True","reason":%q,"message":"dropped by the e2e while the agent was down","observedGeneration":%s,"lastTransitionTime":%q}]}}`,
		ssdv1.PhaseDegraded, ssdv1.ConditionDegraded, ssdv1.ReasonCacheDeviceFailed, generation, time.Now().UTC().Format(time.RFC3339))
	s.kubectl(ctx, t, "-n", "default", "patch", "cachebinding/"+pvc, "--subresource=status", "--type=merge", "-p", status)
}

// expectStillDropped checks that a dropped cache stayed dropped after the
// agent reconciled its binding: the binding is Degraded and the table linear.
// The caller has already seen the agent act on other bindings since its start.
func (s *suite) expectStillDropped(ctx context.Context, t *testing.T, handle string) {
	t.Helper()
	phase := s.jsonpath(ctx, t, "cachebinding/"+droppedVolume, "{.status.phase}", "-n", "default")
	if table := s.dmTable(ctx, t, handle); phase != string(ssdv1.PhaseDegraded) || !strings.Contains(table, " linear ") {
		t.Fatalf("the dropped cache did not stay dropped across the restart: binding %s, table %s\n%s",
			phase, table, s.explain(ctx, object{ns: "default", name: "cachebinding/" + droppedVolume}))
	}
}

// readUntilCached reads a pod's data set with O_DIRECT, pass after pass,
// until the volume's cache has promoted some of it.
func (s *suite) readUntilCached(ctx context.Context, t *testing.T, pod, handle string) {
	t.Helper()
	s.eventually(ctx, t, "the cache holds blocks", object{ns: "default", name: "pod/" + pod}, func() (bool, string, error) {
		s.exec(ctx, t, pod, "for f in /data/f*; do dd if=$f of=/dev/null bs=1M iflag=direct status=none; done")
		// dm-cache status: ... <#used cache blocks>/<#total cache blocks> is field 7.
		used, err := s.c.NodeExec(ctx, "dmsetup status --noflush ssdcache-"+handle+" | awk '{split($7, u, \"/\"); print u[1]}'")
		used = strings.TrimSpace(used)
		return err == nil && used != "" && used != "0", "used blocks: " + used + errOrEmpty(err), nil
	})
}

// expectWarmed checks that a binding's new cache was filled from its hot
// set: status.lastWarmup and a CacheWarmed Event.
func (s *suite) expectWarmed(ctx context.Context, t *testing.T, pvc string) {
	t.Helper()
	binding := object{ns: "default", name: "cachebinding/" + pvc}
	s.eventually(ctx, t, "a CacheWarmed event and status.lastWarmup", binding, func() (bool, string, error) {
		blocks, err := s.c.Kubectl(ctx, "-n", "default", "get", binding.name, "-o", "jsonpath={.status.lastWarmup.blocks}")
		reasons, err2 := s.c.Kubectl(ctx, "-n", "default", "get", "events", "--field-selector", "involvedObject.name="+pvc, "-o", "jsonpath={.items[*].reason}")
		ok := err == nil && err2 == nil && blocks != "" && blocks != "0" && strings.Contains(reasons, "CacheWarmed")
		return ok, fmt.Sprintf("lastWarmup.blocks %q, event reasons %s%s%s", blocks, reasons, errOrEmpty(err), errOrEmpty(err2)), nil
	})
	t.Logf("%s: lastWarmup %s", pvc, s.jsonpath(ctx, t, binding.name, "{.status.lastWarmup}", "-n", "default"))
}

// cachedTable is in a cached volume's dm table, and in no other.
const cachedTable = " writethrough "

// waitTable waits until a staged volume's dm table contains want. A cached
// volume that is being read is polled, not looked at once: every promotion
// of the blocks read swaps its cache out for a linear table for a second or
// two (why CacheBinding online failed twice in CI: it saw "linear" right
// after the binding went Ready); a cache that is really gone still fails
// the wait, at the steps' deadline.
func (s *suite) waitTable(ctx context.Context, t *testing.T, handle, want, what string) {
	t.Helper()
	s.eventually(ctx, t, what, object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector}, func() (bool, string, error) {
		table, err := s.c.NodeExec(ctx, "dmsetup table ssdcache-"+handle)
		return err == nil && strings.Contains(table, want), "table: " + table + errOrEmpty(err), nil
	})
}

// scaleController sets the controller's replicas and waits for them.
func (s *suite) scaleController(ctx context.Context, t *testing.T, replicas int) {
	t.Helper()
	deploy := object{ns: namespace, name: "deployment/" + release + "-controller", pods: "app.kubernetes.io/component=controller"}
	s.kubectl(ctx, t, "-n", namespace, "scale", deploy.name, fmt.Sprintf("--replicas=%d", replicas))
	s.eventually(ctx, t, fmt.Sprintf("%d controller pods", replicas), deploy, func() (bool, string, error) {
		pods, err := s.getPods(ctx, namespace, "-l", deploy.pods)
		ready := 0
		for _, p := range pods {
			if p.DeletionTimestamp == nil && isReady(&p) {
				ready++
			}
		}
		return err == nil && len(pods) == replicas && ready == replicas, fmt.Sprintf("%d pods, %d ready%s", len(pods), ready, errOrEmpty(err)), nil
	})
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stoppedLabel is a node label no node has: a DaemonSet that selects it runs nowhere.
const stoppedLabel = "ssdcache.io/e2e-stopped"

// stopNodePlugin moves the node DaemonSet off the node and waits until its
// pod is gone; the staged volumes stay up without it.
func (s *suite) stopNodePlugin(ctx context.Context, t *testing.T) {
	t.Helper()
	s.pluginInstalled = false // no restarts to watch while it is down
	s.kubectl(ctx, t, "-n", namespace, "patch", "daemonset/"+release+"-node", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"`+stoppedLabel+`":"true"}}}}}`)
	s.eventually(ctx, t, "the node plugin pod is gone", object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector},
		func() (bool, string, error) {
			pods, err := s.getPods(ctx, namespace, "-l", nodeSelector)
			return err == nil && len(pods) == 0, fmt.Sprintf("%d pods%s", len(pods), errOrEmpty(err)), nil
		})
}

// startNodePlugin undoes stopNodePlugin and waits for the new pod to be Ready.
func (s *suite) startNodePlugin(ctx context.Context, t *testing.T) {
	t.Helper()
	s.kubectl(ctx, t, "-n", namespace, "patch", "daemonset/"+release+"-node", "-p",
		`{"spec":{"template":{"spec":{"nodeSelector":{"`+stoppedLabel+`":null}}}}}`)
	plugin := object{ns: namespace, name: "daemonset/" + release + "-node", pods: nodeSelector}
	s.eventually(ctx, t, "a new node plugin pod is Ready", plugin, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", namespace, "get", "pods", "-l", nodeSelector, "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		return err == nil && strings.Contains(out, "=True"), "pods: " + out + errOrEmpty(err), nil
	})
	s.pluginInstalled = true
}
