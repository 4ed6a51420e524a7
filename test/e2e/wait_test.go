package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// No wait of the steps has a deadline of its own: on a busy machine the
// emulated node runs several times slower than on an idle one. Every wait
// runs until the steps' deadline, which TestEndToEnd puts in their context:
// what `go test -timeout` (60m in hack/test-e2e.sh) leaves, less stepsMargin.
const (
	// stepsMargin is kept for what follows a failed step: its report (up to
	// reportTimeout), dumpState (2 minutes) and stopping the cluster (1.5).
	stepsMargin = 5 * time.Minute
	// reportTimeout bounds the kubectl calls of one failure report.
	reportTimeout = time.Minute
	pollInterval  = 2 * time.Second
	// Waits this long are logged with their duration (where a step's time
	// goes), and from verySlowWait on with the events of what they awaited.
	slowWait, verySlowWait = 10 * time.Second, 2 * time.Minute
)

func stepsDeadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if !ok { // go test -timeout 0: no limit given; keep hack/test-e2e.sh's
		d = time.Now().Add(60 * time.Minute)
	}
	return d.Add(-stepsMargin)
}

// timeoutFlag passes what is left of the steps' deadline (ctx's) to a
// kubectl or helm command that waits itself; at least a second, as 0 means
// no limit to some.
func timeoutFlag(ctx context.Context) string {
	d, _ := ctx.Deadline()
	return "--timeout=" + max(time.Until(d).Round(time.Second), time.Second).String()
}

// object is what a wait is about, named as kubectl takes it, for the report
// when the wait fails (explain).
type object struct {
	ns   string // namespace; "" for a cluster-scoped object
	name string // kind/name, e.g. "pod/cached-data"; "" for the namespace as a whole
	pods string // label selector of the pods behind the object, when it is not a pod
}

// eventually polls look (cluster's Poll) until it reports done; each look
// also says what it saw. It fails at the steps' deadline (ctx's), when look
// returns an error (the awaited state can no longer come: a pod that has
// ended, a failed Job), when the node's VM stops, or as soon as a container
// of the node plugin has restarted (see failOnPluginRestart); the failure
// says what was awaited and what look saw last, with a report on obj
// (explain).
func (s *suite) eventually(ctx context.Context, t *testing.T, what string, obj object, look func() (done bool, saw string, err error)) {
	t.Helper()
	start := time.Now()
	var pluginChecked time.Time
	err := s.c.Poll(ctx, what, pollInterval, func() (bool, string, error) {
		done, saw, err := look()
		if !done && err == nil && time.Since(pluginChecked) >= pluginCheckInterval {
			s.failOnPluginRestart(ctx, t, what)
			pluginChecked = time.Now()
		}
		return done, saw, err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, s.explain(ctx, obj))
	}
	if took := time.Since(start); took >= slowWait {
		t.Logf("waited %v for %s", took.Round(time.Second), what)
		if took >= verySlowWait {
			t.Logf("what the wait for %s saw:\n%s", what, s.eventsOf(ctx, obj))
		}
	}
}

// waitReady waits for obj's Ready condition (a pod, a CacheBinding). The
// test's pods run once (restartPolicy Never): one that has ended can never
// be Ready, and the wait fails at once.
func (s *suite) waitReady(ctx context.Context, t *testing.T, obj object) {
	t.Helper()
	const fields = `{.status.phase}|{.status.conditions[?(@.type=="Ready")].status}|{.status.conditions[?(@.type=="Ready")].reason}|{.status.conditions[?(@.type=="Ready")].message}`
	s.eventually(ctx, t, obj.name+" Ready", obj, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", obj.ns, "get", obj.name, "-o", "jsonpath="+fields)
		if err != nil {
			return false, err.Error(), nil
		}
		f := strings.SplitN(out, "|", 4) // the template writes every "|"
		phase, ready := f[0], f[1]
		saw := fmt.Sprintf("phase %q, Ready=%q (%s: %s)", phase, ready, f[2], f[3])
		if strings.HasPrefix(obj.name, "pod/") && (phase == string(corev1.PodFailed) || phase == string(corev1.PodSucceeded)) {
			return false, saw, fmt.Errorf("the pod has ended: %s", saw)
		}
		return ready == "True", saw, nil
	})
}

// waitRollout waits for a DaemonSet or Deployment to be rolled out, as
// `kubectl rollout status` says, polling it.
func (s *suite) waitRollout(ctx context.Context, t *testing.T, obj object) {
	t.Helper()
	s.eventually(ctx, t, obj.name+" rolled out", obj, func() (bool, string, error) {
		out, err := s.c.Kubectl(ctx, "-n", obj.ns, "rollout", "status", obj.name, "--watch=false")
		return err == nil && strings.Contains(out, "successfully rolled out"), strings.TrimSpace(out) + errOrEmpty(err), nil
	})
}

// deleteAndWait deletes objects of namespace ns (kind/name) and waits until
// they are gone, finalizers included: a PVC goes once its volume is deleted,
// a CacheBinding once its cache is detached.
func (s *suite) deleteAndWait(ctx context.Context, t *testing.T, ns string, names ...string) {
	t.Helper()
	s.kubectl(ctx, t, append([]string{"-n", ns, "delete", "--wait=false"}, names...)...)
	for _, name := range names {
		s.eventually(ctx, t, name+" deleted", object{ns: ns, name: name}, func() (bool, string, error) {
			out, err := s.c.Kubectl(ctx, "-n", ns, "get", name, "--ignore-not-found", "-o",
				"jsonpath=deleting since {.metadata.deletionTimestamp}, finalizers {.metadata.finalizers}")
			if err != nil {
				return false, err.Error(), nil
			}
			return strings.TrimSpace(out) == "", "still there: " + out, nil
		})
	}
}

// podsOf are obj's pods: obj itself if it is a pod, else those obj.pods
// selects. The node plugin's are left to pluginReport.
func (s *suite) podsOf(ctx context.Context, obj object) ([]corev1.Pod, error) {
	if podName, isPod := strings.CutPrefix(obj.name, "pod/"); isPod {
		return s.getPods(ctx, obj.ns, "--field-selector", "metadata.name="+podName)
	}
	if obj.pods == "" || obj.pods == nodeSelector {
		return nil, nil
	}
	return s.getPods(ctx, obj.ns, "-l", obj.pods)
}

// eventsOf are the events of obj and of its pods' claims: why a wait took
// minutes, or why a pod still waits for its volume.
func (s *suite) eventsOf(ctx context.Context, obj object) string {
	_, name, _ := strings.Cut(obj.name, "/") // "" for the namespace as a whole
	events := s.events(ctx, obj.ns, name)
	pods, err := s.podsOf(ctx, obj)
	for _, p := range pods {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				events += s.events(ctx, obj.ns, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	return events + errOrEmpty(err)
}

// explain reports on obj for a failed wait: eventsOf, the state and logs of
// each of its pods (podReport), and the node plugin's (pluginReport), as the
// plugin is behind every volume. It has its own time, as the steps' context
// may have ended.
func (s *suite) explain(ctx context.Context, obj object) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	report := s.eventsOf(ctx, obj)
	pods, _ := s.podsOf(ctx, obj) // an error is in eventsOf's
	for _, p := range pods {
		var containers []string
		for _, c := range p.Spec.Containers {
			containers = append(containers, c.Name)
		}
		report += s.podReport(ctx, &p, podLogTail, containers...)
	}
	return report + s.pluginReport(ctx)
}

// events are the last eventTail events about the object called name in
// namespace ns (cluster-scoped objects: ns ""), or about every object when
// name is "".
func (s *suite) events(ctx context.Context, ns, name string) string {
	args := []string{"get", "events", "--sort-by=.lastTimestamp"}
	if ns == "" {
		args = append(args, "-A")
	} else {
		args = append(args, "-n", ns)
	}
	if name != "" {
		args = append(args, "--field-selector", "involvedObject.name="+name)
	}
	out, err := s.c.Kubectl(ctx, args...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	const eventTail = 15
	if len(lines) > eventTail+1 { // the header line, then the last events
		lines = append(lines[:1], lines[len(lines)-eventTail:]...)
	}
	return fmt.Sprintf("--- events of %q in %q:\n%s%s\n", name, ns, strings.Join(lines, "\n"), errOrEmpty(err))
}
