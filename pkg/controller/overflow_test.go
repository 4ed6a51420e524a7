package controller

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// The two sizes a reviewer used to take over a node: both pass the CRD's validation
// and ParseCacheSize, and either one plus a few GiB passes math.MaxInt64.
var hugeSizes = []string{"92233720368547758e2", "9223372036854775k"}

const testNode = "n1"

var t0 = time.Unix(1_700_000_000, 0)

// world is one node with cache capacity, volumes of the ssdcache driver on it, and
// bindings, behind the controller-runtime fake client.
type world struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	r   *BindingReconciler
}

func newWorld(t *testing.T, capacity int64) *world {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ssdv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{
		ssdv1.AnnotationCacheCapacityBytes: strconv.FormatInt(capacity, 10),
	}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(node).
		WithStatusSubresource(&ssdv1.CacheBinding{}).
		WithIndex(&ssdv1.CacheBinding{}, indexPVCName, func(o client.Object) []string {
			return []string{o.(*ssdv1.CacheBinding).Spec.PVCName}
		}).
		WithIndex(&ssdv1.CacheBinding{}, indexNodeName, func(o client.Object) []string {
			return []string{o.(*ssdv1.CacheBinding).Status.NodeName}
		}).
		Build()
	return &world{t: t, ctx: context.Background(), c: c, r: NewBindingReconciler(c, c, &events.FakeRecorder{}, Options{})}
}

// volume adds a bound PVC and its PV of the given size on testNode.
func (w *world) volume(name, size string) {
	w.t.Helper()
	pv := csiPV(ssdv1.DriverName, testNode)
	pv.Name = "pv-" + name
	pv.Spec.CSI.VolumeHandle = "vol-" + name
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv.Name},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	for _, o := range []client.Object{pv, pvc} {
		if err := w.c.Create(w.ctx, o); err != nil {
			w.t.Fatal(err)
		}
	}
}

// binding adds a binding of the PVC of the same name, created age seconds after t0.
// status, when not nil, is what an earlier controller already wrote.
func (w *world) binding(name, size string, age int, status *ssdv1.CacheBindingStatus) {
	w.t.Helper()
	b := &ssdv1.CacheBinding{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
			Finalizers:        []string{ssdv1.Finalizer},
		},
		Spec: ssdv1.CacheBindingSpec{PVCName: name, Size: size, Mode: ssdv1.ModeReadCache, Warmup: ssdv1.WarmupNone},
	}
	if err := w.c.Create(w.ctx, b); err != nil {
		w.t.Fatal(err)
	}
	if status != nil {
		b.Status = *status
		if err := w.c.Status().Update(w.ctx, b); err != nil {
			w.t.Fatal(err)
		}
	}
}

func (w *world) setSize(name, size string) {
	w.t.Helper()
	b := w.get(name)
	b.Spec.Size = size
	if err := w.c.Update(w.ctx, b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) get(name string) *ssdv1.CacheBinding {
	w.t.Helper()
	b := &ssdv1.CacheBinding{}
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: "ns", Name: name}, b); err != nil {
		w.t.Fatal(err)
	}
	return b
}

// reconcile runs the controller on one binding and returns what it wrote.
func (w *world) reconcile(name string) *ssdv1.CacheBinding {
	w.t.Helper()
	if _, err := w.r.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
		w.t.Fatalf("reconcile %s: %v", name, err)
	}
	return w.get(name)
}

func (w *world) wantAdmitted(name string, size int64) *ssdv1.CacheBinding {
	w.t.Helper()
	b := w.reconcile(name)
	if b.Status.NodeName != testNode || b.Status.ResolvedSizeBytes != size {
		w.t.Fatalf("%s: node %q, %d bytes; want admitted to %s with %d bytes (Pending: %s)",
			name, b.Status.NodeName, b.Status.ResolvedSizeBytes, testNode, size, pendingMessage(b))
	}
	return b
}

func (w *world) wantPending(name, reason string, msgParts ...string) *ssdv1.CacheBinding {
	w.t.Helper()
	b := w.reconcile(name)
	c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending)
	if b.Status.NodeName != "" || c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason {
		w.t.Fatalf("%s: node %q, %d bytes, Pending %+v; want pending with reason %s",
			name, b.Status.NodeName, b.Status.ResolvedSizeBytes, c, reason)
	}
	for _, part := range msgParts {
		if !strings.Contains(c.Message, part) {
			w.t.Errorf("%s: Pending message %q does not say %q", name, c.Message, part)
		}
	}
	return b
}

// checkWithinCapacity fails when the bindings admitted to testNode add up to more
// than its capacity (summed in float64 so that the check itself cannot wrap).
func (w *world) checkWithinCapacity(capacity int64) {
	w.t.Helper()
	list := &ssdv1.CacheBindingList{}
	if err := w.c.List(w.ctx, list); err != nil {
		w.t.Fatal(err)
	}
	var sum float64
	for _, b := range list.Items {
		if b.Status.NodeName == testNode {
			sum += float64(b.Status.ResolvedSizeBytes)
		}
	}
	if sum > float64(capacity) {
		w.t.Errorf("bindings admitted to %s take %.0f bytes, more than its %d", testNode, sum, capacity)
	}
}

func pendingMessage(b *ssdv1.CacheBinding) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, ssdv1.ConditionPending); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "none"
}

// TestHugeResizeBesideNormalBinding is the reviewer's attack: an admitted binding is
// grown to nearly 2^63 bytes beside a normal one. It used to wrap the node's sum
// negative and be admitted, leaving every later binding InsufficientCache for good.
// Now the size is capped at the volume's and then must fit like any other growth.
func TestHugeResizeBesideNormalBinding(t *testing.T) {
	const capacity = 20 << 30
	cases := []struct {
		volume   string
		wantSize int64  // bytes the grown binding keeps or gets
		wantMsg  string // in its Pending=False message
	}{
		// Capped at 100Gi, which does not fit beside 5Gi in 20Gi: it keeps 1Gi.
		{"100Gi", 1 << 30, "cannot grow the cache to 107374182400 bytes"},
		// Capped at 10Gi, which fits: it gets the volume's size and no more.
		{"10Gi", 10 << 30, "so the cache is capped at 10737418240 bytes"},
	}
	for _, huge := range hugeSizes {
		for _, c := range cases {
			t.Run(huge+"/volume "+c.volume, func(t *testing.T) {
				w := newWorld(t, capacity)
				w.volume("normal", "100Gi")
				w.volume("huge", c.volume)
				w.volume("later", "100Gi")
				w.binding("normal", "5Gi", 0, nil)
				w.binding("huge", "1Gi", 1, nil)
				w.wantAdmitted("normal", 5<<30)
				w.wantAdmitted("huge", 1<<30)

				w.setSize("huge", huge)
				b := w.wantAdmitted("huge", c.wantSize)
				if msg := pendingMessage(b); !strings.Contains(msg, c.wantMsg) || !strings.Contains(msg, `spec.size "`+huge+`"`) {
					t.Errorf("huge: message %q, want it to name spec.size %q and say %q", msg, huge, c.wantMsg)
				}
				// The node still has room, and the bindings beside it keep theirs.
				w.binding("later", "1Gi", 2, nil)
				w.wantAdmitted("later", 1<<30)
				w.wantAdmitted("normal", 5<<30)
				w.checkWithinCapacity(capacity)
			})
		}
	}
}

// TestHugeCandidateNeverFits: a new binding that can never fit on its node says so,
// naming the field, its value and the most the node allows, and takes no room.
func TestHugeCandidateNeverFits(t *testing.T) {
	const capacity = 20 << 30
	for _, huge := range hugeSizes {
		t.Run(huge, func(t *testing.T) {
			w := newWorld(t, capacity)
			w.volume("normal", "100Gi")
			w.volume("huge", "100Gi")
			w.binding("huge", huge, 0, nil) // older, so it would go first if it could
			w.binding("normal", "5Gi", 1, nil)
			b := w.wantPending("huge", ssdv1.ReasonInsufficientCache,
				`spec.size "`+huge+`"`, "can never be admitted", "at most 21474836480 bytes",
				"capped at 107374182400 bytes")
			if b.Status.ResolvedSizeBytes != 100<<30 {
				t.Errorf("huge: resolvedSizeBytes %d, want the capped 100Gi", b.Status.ResolvedSizeBytes)
			}
			w.wantAdmitted("normal", 5<<30)
			w.wantPending("huge", ssdv1.ReasonInsufficientCache, "can never be admitted")
			w.checkWithinCapacity(capacity)
		})
	}
}

// TestHugeSizeOfUnknownVolume: without the volume's size there is nothing to cap at;
// the node's whole capacity is the limit.
func TestHugeSizeOfUnknownVolume(t *testing.T) {
	w := newWorld(t, 20<<30)
	w.volume("normal", "100Gi")
	w.volume("huge", "0")
	w.binding("huge", hugeSizes[0], 0, nil)
	w.binding("normal", "5Gi", 1, nil)
	w.wantPending("huge", ssdv1.ReasonInsufficientCache, `spec.size "`+hugeSizes[0]+`" needs 9223372036854775800 bytes`,
		"can never be admitted", "at most 21474836480 bytes")
	w.wantAdmitted("normal", 5<<30)
}

// TestPoisonedSumSaturates: two bindings an older controller admitted with sizes near
// 2^63 add up past math.MaxInt64. The sum used to wrap to -816, so the node looked
// empty and a newcomer was admitted on top; it must saturate instead, and the huge
// ones shrink to their volume's size when reconciled, making room the right way.
func TestPoisonedSumSaturates(t *testing.T) {
	const capacity = 20 << 30
	w := newWorld(t, capacity)
	for _, v := range []string{"e", "k", "normal"} {
		w.volume(v, "4Gi")
	}
	w.binding("e", hugeSizes[0], 0, &ssdv1.CacheBindingStatus{NodeName: testNode, VolumeHandle: "vol-e", ResolvedSizeBytes: 9223372036854775800})
	w.binding("k", hugeSizes[1], 1, &ssdv1.CacheBindingStatus{NodeName: testNode, VolumeHandle: "vol-k", ResolvedSizeBytes: 9223372036854775000})
	w.binding("normal", "1Gi", 2, nil)

	w.wantPending("normal", ssdv1.ReasonInsufficientCache, "needs 1073741824 bytes", "0 of 21474836480 bytes free")

	w.wantAdmitted("e", 4<<30)
	w.wantAdmitted("k", 4<<30)
	w.wantAdmitted("normal", 1<<30)
	w.checkWithinCapacity(capacity)
}

// TestNodeLoadNearInt64Edge: the arbitration's sums must not wrap.
func TestNodeLoadNearInt64Edge(t *testing.T) {
	const maxI = math.MaxInt64
	resize := []struct {
		name     string
		load     nodeLoad
		old, new int64
		want     bool
	}{
		{"huge growth beside a small binding", nodeLoad{capacity: 20 << 30, admittedBytes: 5 << 30}, 1 << 30, 9223372036854775800, false},
		{"other huge growth", nodeLoad{capacity: 20 << 30, admittedBytes: 5 << 30}, 1 << 30, 9223372036854775000, false},
		{"growth beside a huge sum", nodeLoad{capacity: 20 << 30, admittedBytes: maxI - 10}, 1 << 30, 1<<30 + 100, false},
		{"fills a MaxInt64 node exactly", nodeLoad{capacity: maxI, admittedBytes: maxI - 1}, 0, 1, true},
		{"one byte past a MaxInt64 node", nodeLoad{capacity: maxI, admittedBytes: maxI - 1}, 0, 2, false},
		{"MaxInt64 growth on an empty MaxInt64 node", nodeLoad{capacity: maxI}, 1, maxI, true},
		{"shrinking a huge cache", nodeLoad{capacity: 20 << 30, admittedBytes: maxI}, maxI, 1 << 30, true},
	}
	for _, c := range resize {
		if got := c.load.resizeFits(c.old, c.new); got != c.want {
			t.Errorf("%s: resizeFits(%d, %d) = %v, want %v", c.name, c.old, c.new, got, c.want)
		}
	}
	fits := []struct {
		name      string
		load      nodeLoad
		candidate int64
		want      bool
		wantFree  int64
	}{
		{"MaxInt64 node, MaxInt64 admitted", nodeLoad{capacity: maxI, admittedBytes: maxI}, 1, false, 0},
		{"MaxInt64 candidate on a MaxInt64 node", nodeLoad{capacity: maxI}, maxI, true, maxI},
		{"huge older pending takes the room", nodeLoad{capacity: maxI, olderPending: []claim{{name: "a", sizeBytes: maxI - 5}}}, 6, false, 5},
		{"negative older claim makes no room", nodeLoad{capacity: 10, olderPending: []claim{{name: "a", sizeBytes: -5}}}, 15, false, 10},
		{"MinInt64 older claim makes no room", nodeLoad{capacity: 10, olderPending: []claim{{name: "a", sizeBytes: math.MinInt64}}}, 11, false, 10},
		{"zero candidate is no cache", nodeLoad{capacity: 10}, 0, false, 10},
		{"negative candidate is no cache", nodeLoad{capacity: 10}, -1, false, 10},
	}
	for _, c := range fits {
		got, free := c.load.fits(claim{name: "z", sizeBytes: c.candidate})
		if got != c.want || free != c.wantFree {
			t.Errorf("%s: fits(%d) = %v, free %d; want %v, free %d", c.name, c.candidate, got, free, c.want, c.wantFree)
		}
	}
}
