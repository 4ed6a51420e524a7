package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// awaitPollInterval is how often awaitCSI asks a connected endpoint again.
const awaitPollInterval = time.Second

// awaitCallTimeout bounds one GetPluginInfo, so that a call to a socket
// being replaced is asked again rather than waited on for the whole timeout.
const awaitCallTimeout = 5 * time.Second

// awaitCSI returns once the CSI endpoint answers GetPluginInfo, or fails
// after timeout. The chart runs it as the plugin container's postStart hook:
// kubelet starts the pod's next containers only after the hook returns, so
// csi-provisioner first dials a socket that already serves. Started earlier,
// it may connect while the socket is being replaced and exits on "Lost
// connection to CSI driver" (csi-lib-utils), a restart for nothing.
//
// It connects with csi-lib-utils' connection.Connect, as the sidecars do,
// and asks rpc.GetDriverName. It does not wait for Probe to say ready
// (rpc.ProbeForever): a node whose pools are not set up yet serves but is
// not ready, and a hook that waited for that would get the container killed.
func awaitCSI(ctx context.Context, endpoint string, timeout time.Duration) error {
	if path, ok := strings.CutPrefix(endpoint, "unix://"); !ok || path == "" {
		return fmt.Errorf("--csi-endpoint %q: want unix:///path/to/socket", endpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// WithTimeout(0) lifts csi-lib-utils' 30s limit on the wait for the
	// socket, leaving ctx (timeout) to end it.
	conn, err := connection.Connect(ctx, endpoint, nil, connection.WithTimeout(0))
	if err != nil {
		return fmt.Errorf("CSI endpoint %s did not accept a connection within %s: %w", endpoint, timeout, err)
	}
	defer conn.Close()
	var name string
	var last error
	err = wait.PollUntilContextCancel(ctx, awaitPollInterval, true, func(ctx context.Context) (bool, error) {
		call, cancelCall := context.WithTimeout(ctx, awaitCallTimeout)
		defer cancelCall()
		name, last = rpc.GetDriverName(call, conn)
		return last == nil, nil
	})
	if err != nil {
		if last == nil {
			last = err // ctx ended before the first call
		}
		return fmt.Errorf("CSI endpoint %s did not answer within %s: %w", endpoint, timeout, last)
	}
	klog.InfoS("CSI endpoint answers", "endpoint", endpoint, "driver", name)
	return nil
}
