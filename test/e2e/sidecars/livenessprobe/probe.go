package main

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/test/e2e/sidecars/internal/sidecar"
)

const (
	// startupConnectTimeout is upstream's wait for the driver at start: long
	// enough for a crash-looping plugin to come back between restarts.
	startupConnectTimeout = 5 * time.Minute
	// discoveryCallTimeout bounds GetPluginInfo once the socket answers.
	discoveryCallTimeout = 30 * time.Second
)

// run learns the driver name and serves /healthz on httpLis until ctx ends.
// Being stopped while still waiting for the driver is not an error.
func run(ctx context.Context, cfg config, httpLis net.Listener) error {
	driverName, err := sidecar.DiscoverDriverName(ctx, cfg.csiAddress, startupConnectTimeout, discoveryCallTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", &healthProbe{csiAddress: cfg.csiAddress, driverName: driverName, timeout: cfg.probeTimeout})
	return sidecar.ServeHTTP(ctx, httpLis, mux)
}

// healthProbe turns one CSI Identity.Probe into one HTTP answer.
type healthProbe struct {
	csiAddress string
	driverName string
	timeout    time.Duration
}

// ServeHTTP dials the driver afresh for every request, as upstream does, so a
// plugin that restarted or hung is seen as it is now.
func (h *healthProbe) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx, cancel := context.WithTimeout(req.Context(), h.timeout)
	defer cancel()

	conn, err := sidecar.Connect(ctx, h.csiAddress, 0)
	if err != nil {
		respond(w, http.StatusInternalServerError, err.Error())
		klog.ErrorS(err, "Failed to establish connection to CSI driver", "driver", h.driverName)
		return
	}
	defer sidecar.CloseConn(conn, h.csiAddress)

	klog.V(5).InfoS("Sending probe request to CSI driver", "driver", h.driverName)
	ready, err := rpc.Probe(ctx, conn)
	if err != nil {
		respond(w, http.StatusInternalServerError, err.Error())
		klog.ErrorS(err, "Health check failed", "driver", h.driverName)
		return
	}
	if !ready {
		respond(w, http.StatusInternalServerError, "driver responded but is not ready")
		klog.ErrorS(nil, "Driver responded but is not ready", "driver", h.driverName)
		return
	}
	respond(w, http.StatusOK, "ok")
	klog.V(5).InfoS("Health check succeeded", "driver", h.driverName)
}

func respond(w http.ResponseWriter, code int, body string) {
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
