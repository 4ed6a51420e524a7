package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// awaitPollInterval is how often awaitCSI asks the endpoint again.
const awaitPollInterval = time.Second

// awaitCSI returns once the CSI endpoint answers GetPluginInfo, or fails
// after timeout. The chart runs it as the plugin container's postStart hook:
// kubelet starts the pod's next containers only after the hook returns, so
// csi-provisioner first dials a socket that already serves. Started earlier,
// it may connect while the socket is being replaced and exits on "Lost
// connection to CSI driver" (csi-lib-utils), a restart for nothing.
func awaitCSI(ctx context.Context, endpoint string, timeout time.Duration) error {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || path == "" {
		return fmt.Errorf("--csi-endpoint %q: want unix:///path/to/socket", endpoint)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	identity := csi.NewIdentityClient(conn)
	var last error
	for {
		call, cancelCall := context.WithTimeout(ctx, 5*awaitPollInterval)
		info, err := identity.GetPluginInfo(call, &csi.GetPluginInfoRequest{})
		cancelCall()
		if err == nil {
			klog.InfoS("CSI endpoint answers", "endpoint", endpoint, "driver", info.GetName())
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("CSI endpoint %s did not answer within %s: %w", endpoint, timeout, last)
		case <-time.After(awaitPollInterval):
		}
	}
}
