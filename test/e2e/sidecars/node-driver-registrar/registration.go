package main

import (
	"context"

	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// supportedVersions are the registration API versions upstream advertises.
var supportedVersions = []string{"1.0.0"}

// registrationServer answers kubelet's plugin watcher.
type registrationServer struct {
	registerapi.UnimplementedRegistrationServer

	driverName string
	endpoint   string
	// exit ends the process; injected so tests can observe it.
	exit func(code int)
}

func newRegistrationServer(driverName, endpoint string, exit func(int)) *registrationServer {
	return &registrationServer{driverName: driverName, endpoint: endpoint, exit: exit}
}

// GetInfo tells kubelet which CSI driver this is and where its socket is.
func (s *registrationServer) GetInfo(_ context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("Received GetInfo call", "driver", s.driverName, "endpoint", s.endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.driverName,
		Endpoint:          s.endpoint,
		SupportedVersions: supportedVersions,
	}, nil
}

// NotifyRegistrationStatus logs kubelet's verdict. On failure it exits 1, as
// upstream does, so that kubelet restarts the container and registration is
// tried again from scratch.
func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !status.PluginRegistered {
		klog.ErrorS(nil, "Registration failed, restarting registration container", "driver", s.driverName, "kubeletError", status.Error)
		s.exit(1)
		return &registerapi.RegistrationStatusResponse{}, nil
	}
	klog.InfoS("Plugin registered with kubelet", "driver", s.driverName)
	return &registerapi.RegistrationStatusResponse{}, nil
}
