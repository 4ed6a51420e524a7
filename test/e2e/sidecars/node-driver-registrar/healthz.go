package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

// healthChecker serves /healthz: the registration socket must exist and
// answer GetInfo with this driver's name, as upstream checks.
type healthChecker struct {
	socketPath string
	driverName string
	timeout    time.Duration
}

func (h *healthChecker) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	exists, err := socketExists(h.socketPath)
	switch {
	case err != nil:
		respond(w, http.StatusInternalServerError, err.Error())
		klog.ErrorS(err, "Health check failed")
	case !exists:
		respond(w, http.StatusNotFound, "registration socket does not exist")
		klog.ErrorS(nil, "Health check failed, registration socket does not exist", "socketPath", h.socketPath)
	default:
		if err := h.checkLiveSocket(req.Context()); err != nil {
			respond(w, http.StatusInternalServerError, err.Error())
			klog.ErrorS(err, "Health check failed")
			return
		}
		respond(w, http.StatusOK, "ok")
		klog.V(5).InfoS("Health check succeeded")
	}
}

// checkLiveSocket calls GetInfo on the registration socket, as kubelet would.
func (h *healthChecker) checkLiveSocket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	conn, err := sidecar.Connect(ctx, h.socketPath, h.timeout)
	if err != nil {
		return fmt.Errorf("error connecting to node-registrar socket %s: %w", h.socketPath, err)
	}
	defer sidecar.CloseConn(conn, h.socketPath)

	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("error getting info from node-registrar socket: %w", err)
	}
	if info.Name != h.driverName {
		return fmt.Errorf("registration socket %s answers for driver %q, want %q", h.socketPath, info.Name, h.driverName)
	}
	return nil
}

func respond(w http.ResponseWriter, code int, body string) {
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
