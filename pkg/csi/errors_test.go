package csi

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssdcache/ssdcache/pkg/command"
)

// A storage command killed for its deadline is DeadlineExceeded at the CSI
// boundary, so the CO retries, rather than Internal.
func TestKilledCommandIsDeadlineExceeded(t *testing.T) {
	killed := &command.Error{Command: "lvm lvs", ExitCode: -1,
		Err: fmt.Errorf("%w after 10m0s (signal: killed)", context.DeadlineExceeded)}
	wrapped := fmt.Errorf("stage volume pvc-1: %w", killed)
	if got := status.Code(toStatus(wrapped)); got != codes.DeadlineExceeded {
		t.Fatalf("code = %v, want DeadlineExceeded", got)
	}
}
