package csi

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/lvm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
)

// toStatus turns a backend error into the gRPC status the CSI spec asks for.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, cache.ErrInvalid), errors.Is(err, cache.ErrUnknownClass), errors.Is(err, lvm.ErrInvalidDevice):
		return codes.InvalidArgument
	case errors.Is(err, lvm.ErrNoSpace):
		return codes.ResourceExhausted
	case errors.Is(err, lvm.ErrNotFound), errors.Is(err, dm.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, cache.ErrNotStaged), errors.Is(err, cache.ErrOriginMismatch), errors.Is(err, lvm.ErrDeviceInUse),
		errors.Is(err, mounter.ErrNoFilesystem):
		return codes.FailedPrecondition
	}
	return codes.Internal
}

func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

func busy(volumeID string) error {
	return status.Errorf(codes.Aborted, "an operation on volume %s is already in progress", volumeID)
}
