package api

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// TestDeviceClassCannotBeAddedOrRemoved: spec.deviceClass is immutable, and
// that includes adding it to a binding created without one and removing it
// from one created with one, which the rule on the field itself does not
// see (a transition rule runs only when the old and the new object both
// have the field). Admitted bindings are charged to their node's pool of
// their class, so a class that changed after admission would leave the
// cache carved from another pool than the one charged. Updates that leave
// deviceClass as it was still go through.
func TestDeviceClassCannotBeAddedOrRemoved(t *testing.T) {
	ctx, c := needAPIServer(t)
	ns := newNamespace(t, ctx, c)
	node := createNode(t, ctx, c, "1000000000000")
	setAnnotation(t, ctx, c, &corev1.Node{}, node, ssdv1.AnnotationDeviceClass, "nvme")
	createVolume(t, ctx, c, ns, volume{pvc: "plain", node: node, size: "50Gi"})
	createVolume(t, ctx, c, ns, volume{pvc: "classed", node: node, size: "50Gi"})
	createBinding(t, ctx, c, ns, "plain", "plain", "1Gi")
	create(t, ctx, c, &ssdv1.CacheBinding{ObjectMeta: metav1.ObjectMeta{Name: "classed", Namespace: ns},
		Spec: ssdv1.CacheBindingSpec{PVCName: "classed", Size: "1Gi", DeviceClass: "nvme"}})
	waitAdmitted(t, c, ns, "plain", node, 1<<30)
	waitAdmitted(t, c, ns, "classed", node, 1<<30)
	// Never admitted: its PVC does not exist. The rule does not wait for admission.
	createBinding(t, ctx, c, ns, "waiting", "missing", "1Gi")

	const (
		addedOrRemoved = "spec.deviceClass: Forbidden: deviceClass is immutable: it cannot be added or removed once the binding exists; delete this binding and create another to use a different class"
		changed        = "deviceClass is immutable; delete this binding and create another to use a different class"
	)
	for _, tc := range []struct{ name, binding, patchType, patch, want string }{
		{"added after admission", "plain", merge, `{"spec":{"deviceClass":"nvme"}}`, addedOrRemoved},
		{"removed after admission", "classed", merge, `{"spec":{"deviceClass":null}}`, addedOrRemoved},
		{"removed by a JSON patch", "classed", jsonPatch, `[{"op":"remove","path":"/spec/deviceClass"}]`, addedOrRemoved},
		{"changed after admission", "classed", merge, `{"spec":{"deviceClass":"optane"}}`, changed},
		{"added before admission", "waiting", merge, `{"spec":{"deviceClass":"nvme"}}`, addedOrRemoved},
		{"size changed without a class", "plain", merge, `{"spec":{"size":"2Gi"}}`, ""},
		{"size changed with a class", "classed", merge, `{"spec":{"size":"2Gi"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Patch(ctx, bindingObject(ns, tc.binding, nil), client.RawPatch(types.PatchType(tc.patchType), []byte(tc.patch)))
			checkRefusal(t, "patch "+tc.patch, err, tc.want)
		})
	}
	// A typed client that drops the field, as one built without it would.
	t.Run("removed by an update", func(t *testing.T) {
		checkRefusal(t, "update without deviceClass", updateBinding(ctx, c, ns, "classed", func(b *ssdv1.CacheBinding) {
			b.Spec.DeviceClass = ""
		}), addedOrRemoved)
	})
	for name, want := range map[string]string{"plain": "", "classed": "nvme", "waiting": ""} {
		if b, err := getBinding(ctx, c, ns, name); err != nil || b.Spec.DeviceClass != want {
			t.Errorf("binding %s after the refusals: deviceClass %q (%v), want %q", name, b.Spec.DeviceClass, err, want)
		}
	}
}

const (
	merge     = string(types.MergePatchType)
	jsonPatch = string(types.JSONPatchType)
)

// checkRefusal fails t unless err is a refusal whose message holds want, or,
// want being "", unless err is nil.
func checkRefusal(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("%s: refused: %v", what, err)
	case want == "":
	case err == nil:
		t.Fatalf("%s: accepted, want a refusal containing %q", what, want)
	case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want):
		t.Fatalf("%s: %v, want an Invalid refusal containing %q", what, err, want)
	default:
		t.Logf("refused: %v", err)
	}
}

// updateBinding applies change to the API server's copy of the binding with
// an update, trying again when the controller wrote it in between, and
// returns the update's error.
func updateBinding(ctx context.Context, c client.Client, ns, name string, change func(*ssdv1.CacheBinding)) error {
	for {
		b, err := getBinding(ctx, c, ns, name)
		if err != nil {
			return err
		}
		change(b)
		if err := c.Update(ctx, b); !apierrors.IsConflict(err) {
			return err
		}
	}
}
