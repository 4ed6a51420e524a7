package controller

import (
	"testing"

	ssdv1 "github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// classedBinding creates a binding of deviceClass on a 100Gi volume.
func (w *world) classedBinding(name, deviceClass string) {
	w.t.Helper()
	w.volume(name, "100Gi")
	w.binding(name, "1Gi", 0, nil)
	b := w.get(name)
	b.Spec.DeviceClass = deviceClass
	if err := w.c.Update(w.ctx, b); err != nil {
		w.t.Fatal(err)
	}
}

// During an upgrade an agent before 0.2 reports its class only under the
// deprecated annotation: the controller reads it there and names it.
func TestDeviceClassFallsBackToTheDeprecatedAnnotation(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.annotateNode(map[string]string{ssdv1.AnnotationDeviceClass: "-", ssdv1.AnnotationDeviceClassDeprecated: "optane"})
	w.classedBinding("optane", "optane")
	w.classedBinding("nvme", "nvme")
	w.wantAdmitted("optane", 1<<30)
	w.wantPending("nvme", ssdv1.ReasonDeviceClassUnavailable, `is of class "optane" (annotation `+ssdv1.AnnotationDeviceClassDeprecated+`)`)
}

// An agent of 0.2 writes both names; the new one is the one read, even were
// they to differ.
func TestDeviceClassAnnotationWinsOverTheDeprecatedOne(t *testing.T) {
	w := newWorld(t, 1<<40)
	w.annotateNode(map[string]string{ssdv1.AnnotationDeviceClass: "nvme", ssdv1.AnnotationDeviceClassDeprecated: "optane"})
	w.classedBinding("nvme", "nvme")
	w.classedBinding("optane", "optane")
	w.wantAdmitted("nvme", 1<<30)
	w.wantPending("optane", ssdv1.ReasonDeviceClassUnavailable, `is of class "nvme" (annotation `+ssdv1.AnnotationDeviceClass+`)`)
}
