package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/bench/reportcm"
)

const (
	// serviceAccountNamespaceFile is where kubelet mounts the pod's namespace
	// beside its ServiceAccount token.
	serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	// publishTimeout bounds writing the ConfigMap after the run; a pod's
	// default termination grace period is 30s.
	publishTimeout = 20 * time.Second
	// checkTimeout bounds the dry run before the benchmark.
	checkTimeout = 30 * time.Second
)

type reportFlags struct {
	configMap string
	namespace string
}

// pod is what the bench reads from the pod it runs in to reach the API server.
type pod struct {
	getenv   func(string) string
	readFile func(string) ([]byte, error)
	// configMaps connects to the API server as the pod's ServiceAccount.
	configMaps func() (corev1client.ConfigMapsGetter, error)
}

func osPod() pod {
	return pod{getenv: os.Getenv, readFile: os.ReadFile, configMaps: inClusterConfigMaps}
}

func inClusterConfigMaps() (corev1client.ConfigMapsGetter, error) {
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, fmt.Errorf("not in a Kubernetes pod, where the ConfigMap would be written with the pod's ServiceAccount "+
			"(use -output-dir alone elsewhere): %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("in-cluster API configuration: %w", err)
	}
	cfg.UserAgent = "ssdcache-bench"
	return corev1client.NewForConfig(cfg)
}

// namespace follows client-go's in-cluster rule: $POD_NAMESPACE, else the
// namespace mounted with the ServiceAccount token.
func (p pod) namespace() (string, error) {
	if ns := p.getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	data, err := p.readFile(serviceAccountNamespaceFile)
	if err != nil {
		return "", fmt.Errorf("-report-namespace is unset, POD_NAMESPACE is unset, and the pod's namespace cannot be read: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// reportPublisher returns nil when no ConfigMap is asked for; otherwise a
// publisher whose write the API server has accepted in a dry run.
func reportPublisher(ctx context.Context, f reportFlags, p pod) (*reportcm.Publisher, error) {
	if f.configMap == "" {
		if f.namespace != "" {
			return nil, fmt.Errorf("-report-namespace %q given without -report-configmap", f.namespace)
		}
		return nil, nil
	}
	// Connecting first: outside a pod, "not in a pod" is the useful message.
	client, err := p.configMaps()
	if err != nil {
		return nil, fmt.Errorf("-report-configmap %q: %w", f.configMap, err)
	}
	ns := f.namespace
	if ns == "" {
		if ns, err = p.namespace(); err != nil {
			return nil, fmt.Errorf("-report-configmap %q: %w", f.configMap, err)
		}
	}
	publisher, err := reportcm.New(client, ns, f.configMap)
	if err != nil {
		return nil, fmt.Errorf("-report-configmap %q / -report-namespace %q: %w", f.configMap, ns, err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := publisher.Check(checkCtx); err != nil {
		return nil, fmt.Errorf("-report-configmap %q: the API server refuses the report: %w", f.configMap, err)
	}
	klog.InfoS("The report will be published", "configMap", klog.KRef(ns, f.configMap))
	return publisher, nil
}
