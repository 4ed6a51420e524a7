// Package reportcm publishes a benchmark report as a ConfigMap, so that the
// report of a bench Job can be read with kubectl without reaching its volume.
package reportcm

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/bench"
)

// The ConfigMap is written with server-side apply: "patch" on the named
// object, plus "create" when apply creates it (the API server checks both; the
// chart test proves it). No get or update.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch

const (
	// FieldManager owns every field the publisher writes.
	FieldManager = "ssdcache-bench"
	// AnnotationCompletedAt holds the benchmark's finish time (RFC 3339, UTC).
	AnnotationCompletedAt = "ssdcache.io/bench-completed-at"
	// AnnotationOutcome is "complete", or "stopped early: <error>" when the
	// report is partial.
	AnnotationOutcome = "ssdcache.io/bench-outcome"
	// AnnotationOmitted lists the files left out to stay under MaxDataBytes,
	// with their sizes; absent when every file fits.
	AnnotationOmitted = "ssdcache.io/bench-omitted"
	// MaxDataBytes bounds keys plus values: the API server refuses a ConfigMap
	// over 1 MiB, and the object's metadata needs room too.
	MaxDataBytes = 900 << 10
)

// Labels every report ConfigMap carries, so that reports can be listed.
var labels = map[string]string{
	"app.kubernetes.io/name":      "ssdcache",
	"app.kubernetes.io/component": "bench",
}

// droppable are the files given up, in this order, when the report is too
// large; report.json, the complete record, is never dropped.
var droppable = []string{bench.ConvergenceSVG, bench.ReportMarkdown}

// Publisher writes one ConfigMap.
type Publisher struct {
	configMaps corev1client.ConfigMapsGetter
	namespace  string
	name       string
}

// New checks the ConfigMap's namespace and name.
func New(configMaps corev1client.ConfigMapsGetter, namespace, name string) (*Publisher, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("namespace %q is not a namespace name: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("ConfigMap name %q is not allowed: %s", name, strings.Join(errs, "; "))
	}
	return &Publisher{configMaps: configMaps, namespace: namespace, name: name}, nil
}

// Check asks the API server, with a dry run, whether the ConfigMap can be
// written, so that missing RBAC or a wrong namespace fails before a long
// benchmark rather than after it.
func (p *Publisher) Check(ctx context.Context) error {
	cm := p.base().WithAnnotations(map[string]string{AnnotationOutcome: "dry run"})
	if err := p.apply(ctx, cm, []string{metav1.DryRunAll}); err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	return nil
}

// Publish creates or replaces the ConfigMap with the report's files.
func (p *Publisher) Publish(ctx context.Context, r *bench.Report) error {
	files, err := bench.RenderFiles(r)
	if err != nil {
		return err
	}
	kept, omitted, err := fit(files, MaxDataBytes)
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", p.namespace, p.name, err)
	}
	cm := p.base().WithAnnotations(annotations(r, omitted)).WithData(kept)
	if err := p.apply(ctx, cm, nil); err != nil {
		return err
	}
	klog.InfoS("Report published", "configMap", klog.KRef(p.namespace, p.name), "keys", len(kept), "omitted", omitted)
	return nil
}

func (p *Publisher) base() *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(p.name, p.namespace).WithLabels(labels)
}

// apply forces ownership: the publisher is the ConfigMap's only writer, and a
// rerun must replace every key of the previous report, dropped ones included.
func (p *Publisher) apply(ctx context.Context, cm *corev1ac.ConfigMapApplyConfiguration, dryRun []string) error {
	_, err := p.configMaps.ConfigMaps(p.namespace).Apply(ctx, cm,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true, DryRun: dryRun})
	if err != nil {
		return fmt.Errorf("applying ConfigMap %s/%s: %w", p.namespace, p.name, err)
	}
	return nil
}

func annotations(r *bench.Report, omitted []string) map[string]string {
	a := map[string]string{
		AnnotationCompletedAt: r.FinishedAt.UTC().Format(time.RFC3339),
		AnnotationOutcome:     "complete",
	}
	if r.Error != "" {
		a[AnnotationOutcome] = "stopped early: " + r.Error
	}
	if len(omitted) > 0 {
		a[AnnotationOmitted] = strings.Join(omitted, ", ")
	}
	return a
}

// fit returns the files as ConfigMap data within limit bytes (keys plus
// values, as the API server counts them), dropping droppable files in order,
// and describes what it dropped.
func fit(files []bench.File, limit int) (map[string]string, []string, error) {
	data := map[string]string{}
	size := 0
	for _, f := range files {
		data[f.Name] = string(f.Data)
		size += len(f.Name) + len(f.Data)
	}
	var omitted []string
	for _, name := range droppable {
		value, ok := data[name]
		if size <= limit || !ok {
			continue
		}
		delete(data, name)
		size -= len(name) + len(value)
		omitted = append(omitted, fmt.Sprintf("%s (%d bytes): the report would exceed %d bytes", name, len(value), limit))
	}
	if size > limit {
		return nil, nil, fmt.Errorf("%s alone is %d bytes, over the %d bytes a report ConfigMap may hold; the files on the volume are complete",
			bench.ReportJSON, size, limit)
	}
	return data, omitted, nil
}
