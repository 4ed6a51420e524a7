package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cache"
)

type publishRequest struct {
	id, stagingPath, targetPath string
	kind                        volumeKind
}

func (s *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	r, err := validatePublish(req)
	if err != nil {
		return nil, err
	}
	if !s.acquire(ctx, r.id) {
		return nil, busy(r.id)
	}
	defer s.locks.Release(r.id)
	source, err := s.publishSource(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := s.checkSingleWriter(r, source); err != nil {
		return nil, err
	}
	if err := s.bind(r, source); err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func validatePublish(req *csi.NodePublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{id: req.GetVolumeId(), stagingPath: req.GetStagingTargetPath(), targetPath: req.GetTargetPath()}
	switch {
	case r.id == "":
		return r, invalid("volume_id is required")
	case r.stagingPath == "":
		return r, invalid("staging_target_path is required: this plugin stages volumes")
	case r.targetPath == "":
		return r, invalid("target_path is required")
	}
	if err := cache.ValidateVolumeID(r.id); err != nil {
		return r, status.Errorf(codes.NotFound, "volume_id: %v", err)
	}
	var err error
	if r.kind, err = checkCapability(req.GetVolumeCapability()); err != nil {
		return r, invalid("volume_capability: %v", err)
	}
	r.kind.readOnly = r.kind.readOnly || req.GetReadonly()
	return r, nil
}

// publishSource is what gets bind-mounted: the staged filesystem, or the dm
// device itself for a raw block volume.
func (s *NodeServer) publishSource(ctx context.Context, r publishRequest) (string, error) {
	st, err := s.engine.Inspect(ctx, r.id)
	if err != nil {
		return "", toStatus(err)
	}
	if !st.Staged {
		return "", status.Errorf(codes.FailedPrecondition, "volume %s is not staged on this node", r.id)
	}
	if r.kind.block {
		return cache.DevicePath(r.id), nil
	}
	mounted, err := s.mounter.IsMountPoint(r.stagingPath)
	if err != nil || !mounted {
		return "", status.Errorf(codes.FailedPrecondition, "staging path %s of volume %s is not mounted (%v)", r.stagingPath, r.id, err)
	}
	return r.stagingPath, nil
}

// checkSingleWriter refuses a second publication of a single-writer volume.
func (s *NodeServer) checkSingleWriter(r publishRequest, source string) error {
	if !r.kind.singleWriter {
		return nil
	}
	refs, err := s.mounter.MountRefs(source)
	if err != nil {
		return toStatus(err)
	}
	for _, ref := range refs {
		if ref != r.targetPath && ref != r.stagingPath {
			return status.Errorf(codes.FailedPrecondition, "volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %s", r.id, ref)
		}
	}
	return nil
}

func (s *NodeServer) bind(r publishRequest, source string) error {
	exists, _, err := s.mounter.Stat(r.targetPath)
	if err != nil {
		return err
	}
	if exists {
		if mounted, err := s.mounter.IsMountPoint(r.targetPath); err != nil || mounted {
			return err
		}
	} else if r.kind.block {
		err = s.mounter.MakeFile(r.targetPath)
	} else {
		err = s.mounter.MakeDir(r.targetPath)
	}
	if err != nil {
		return err
	}
	klog.InfoS("Publishing volume", "volumeID", r.id, "source", source, "target", r.targetPath, "readOnly", r.kind.readOnly)
	return s.mounter.BindMount(source, r.targetPath, r.kind.readOnly)
}

func (s *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	if target == "" {
		return nil, invalid("target_path is required")
	}
	if !s.acquire(ctx, id) {
		return nil, busy(id)
	}
	defer s.locks.Release(id)
	if err := s.unpublishLocked(ctx, id, target); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unpublishLocked unmounts and removes the target path, holding the
// volume's lock. A device left suspended is resumed first: a bind mount's
// unmount writes nothing while the staging mount holds the filesystem, but
// as its last mount (the staging mount gone by hand, or lost) it shuts the
// filesystem down and writes, and would hang as NodeUnstage's did.
func (s *NodeServer) unpublishLocked(ctx context.Context, id, target string) error {
	if cache.ValidateVolumeID(id) == nil { // an invalid ID names no device
		if err := s.resumeLeftSuspended(ctx, id); err != nil {
			return err
		}
	}
	if err := s.mounter.Unmount(target); err != nil {
		return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
	}
	if err := s.mounter.Remove(target); err != nil {
		return status.Errorf(codes.Internal, "remove %s: %v", target, err)
	}
	return nil
}
