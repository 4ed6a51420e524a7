package csi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
	"github.com/ssdcache/ssdcache/pkg/mounter"
)

// NodeServer stages volumes as dm devices (with or without a cache) and
// publishes them to pods.
type NodeServer struct {
	csi.UnimplementedNodeServer
	nodeID            string
	maxVolumesPerNode int64
	engine            *cache.Engine
	mounter           mounter.Interface
	locks             *cache.VolumeLocks
	lockWait          time.Duration
	staged            func(context.Context, StagedVolume)
}

// StagedVolume is what NodeStageVolume tells Deps.Staged about a volume it
// brought up (linear, or as it was if it was staged already).
type StagedVolume struct {
	ID string
	// Context is the volume context of the request.
	Context map[string]string
	// OriginBytes is the size of the volume's origin device.
	OriginBytes uint64
}

// stageRequest is a validated NodeStageVolume.
type stageRequest struct {
	id, stagingPath string
	kind            volumeKind
	params          volumeParams
}

func (s *NodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	r, err := validateStage(req)
	if err != nil {
		return nil, err
	}
	origin, err := s.stageLocked(ctx, r)
	if err != nil {
		return nil, err
	}
	// Told after the volume's lock is free, so that the node agent can
	// attach the cache at once instead of finding the volume busy.
	s.staged(ctx, StagedVolume{ID: r.id, Context: req.GetVolumeContext(), OriginBytes: origin.Bytes})
	return &csi.NodeStageVolumeResponse{}, nil
}

// acquire takes the volume's lock for a node call, waiting up to lockWait
// for its holder: answering Aborted at once while the node agent attaches a
// cache sends kubelet into a backoff that outlasts the agent's work by
// minutes, and the pod with it.
func (s *NodeServer) acquire(ctx context.Context, volumeID string) bool {
	if s.lockWait <= 0 {
		return s.locks.TryAcquire(volumeID)
	}
	ctx, cancel := context.WithTimeout(ctx, s.lockWait)
	defer cancel()
	return s.locks.Acquire(ctx, volumeID)
}

// stageLocked brings the volume up and mounts it, holding its lock.
func (s *NodeServer) stageLocked(ctx context.Context, r stageRequest) (cache.Origin, error) {
	if !s.acquire(ctx, r.id) {
		return cache.Origin{}, busy(r.id)
	}
	defer s.locks.Release(r.id)
	spec, err := s.planStage(ctx, r)
	if err != nil {
		return cache.Origin{}, toStatus(err)
	}
	if err := s.applyStage(ctx, r, spec); err != nil {
		return cache.Origin{}, toStatus(err)
	}
	return spec.Origin, nil
}

func validateStage(req *csi.NodeStageVolumeRequest) (stageRequest, error) {
	r := stageRequest{id: req.GetVolumeId(), stagingPath: req.GetStagingTargetPath()}
	if r.id == "" {
		return r, invalid("volume_id is required")
	}
	if err := cache.ValidateVolumeID(r.id); err != nil {
		return r, invalid("volume_id: %v", err)
	}
	if r.stagingPath == "" {
		return r, invalid("staging_target_path is required")
	}
	var err error
	if r.kind, err = checkCapability(req.GetVolumeCapability()); err != nil {
		return r, invalid("volume_capability: %v", err)
	}
	if r.params, err = parseParams(req.GetVolumeContext(), true); err != nil {
		return r, invalid("volume_context: %v", err)
	}
	return r, nil
}

// planStage finds the origin.
func (s *NodeServer) planStage(ctx context.Context, r stageRequest) (cache.StageSpec, error) {
	spec := cache.StageSpec{VolumeID: r.id}
	var err error
	if r.params.device != "" {
		spec.Origin, err = s.engine.OriginDisk(ctx, r.params.device)
	} else {
		spec.Origin, err = s.engine.OriginLV(ctx, r.id)
	}
	return spec, err
}

func (s *NodeServer) applyStage(ctx context.Context, r stageRequest, spec cache.StageSpec) error {
	device, err := s.engine.Stage(ctx, spec)
	if err != nil {
		return err
	}
	if r.kind.block {
		return nil // the dm device itself is published
	}
	if err := s.mounter.MakeDir(r.stagingPath); err != nil {
		return err
	}
	mounted, err := s.mounter.IsMountPoint(r.stagingPath)
	if err != nil {
		return err
	}
	if mounted {
		return s.checkStagedMount(r, device)
	}
	klog.InfoS("Mounting staged volume", "volumeID", r.id, "device", device, "path", r.stagingPath, "fsType", r.kind.fsType)
	if r.params.device != "" && !r.params.format {
		// An existing disk is never formatted unless its PV asks for it.
		err := s.mounter.MountExisting(device, r.stagingPath, r.kind.fsType, r.kind.flags)
		if errors.Is(err, mounter.ErrNoFilesystem) {
			return fmt.Errorf("static volume %s: disk %s: %w; it may hold data blkid does not recognise (a raw database, dm-crypt), so it is not formatted; set volumeAttributes %s: \"true\" on the PersistentVolume to create %s on it",
				r.id, r.params.device, err, ContextFormat, r.kind.fsType)
		}
		return err
	}
	return s.mounter.FormatAndMount(device, r.stagingPath, r.kind.fsType, r.kind.flags)
}

// checkStagedMount accepts a staging path already mounted from the volume's
// own device (a repeated NodeStage) and refuses one that something else is
// mounted on: answering OK would publish the wrong data to the pod.
func (s *NodeServer) checkStagedMount(r stageRequest, device string) error {
	same, source, err := s.mounter.MountedFrom(r.stagingPath, device)
	if err != nil || same {
		return err
	}
	return status.Errorf(codes.FailedPrecondition, "staging_target_path %s is already a mount point of %s, not of volume %s's device %s",
		r.stagingPath, source, r.id, device)
}

func (s *NodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	if path == "" {
		return nil, invalid("staging_target_path is required")
	}
	if cache.ValidateVolumeID(id) != nil {
		return &csi.NodeUnstageVolumeResponse{}, nil // never staged
	}
	if !s.acquire(ctx, id) {
		return nil, busy(id)
	}
	defer s.locks.Release(id)
	if err := s.unstageLocked(ctx, id, path); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unstageLocked unmounts the staging path and takes the volume's device
// down, holding its lock. A device left suspended is resumed first: the
// unmount writes through it.
func (s *NodeServer) unstageLocked(ctx context.Context, id, path string) error {
	if err := s.resumeLeftSuspended(ctx, id); err != nil {
		return err
	}
	if err := s.mounter.Unmount(path); err != nil {
		return status.Errorf(codes.Internal, "unmount %s: %v", path, err)
	}
	if err := s.engine.Unstage(ctx, id); err != nil {
		return toStatus(fmt.Errorf("unstage volume %s: %w", id, err))
	}
	return nil
}

// resumeLeftSuspended rolls back a reload the plugin was killed in between
// suspend and resume (SIGKILL during a promotion's table swap, the OOM
// killer): a table it loaded is dropped and the live one resumed. A caller
// about to unmount a filesystem on the device (or flush or remove it) must
// call it first: the unmount's journal and superblock writes would queue on
// the suspended device and hold the call in D state with the volume's lock,
// which the monitor's own resume needs, and the volume would stay stuck
// until someone ran dmsetup resume by hand (issue 37). The caller holds the
// lock, so no change of this process is in flight and a suspended device
// was left so, the same rule the engine's Stage, SetCache and Unstage
// follow. A volume with no device has nothing to resume.
func (s *NodeServer) resumeLeftSuspended(ctx context.Context, id string) error {
	err := s.engine.RecoverInterruptedReload(ctx, id)
	if err == nil || errors.Is(err, dm.ErrNotFound) {
		return nil
	}
	return toStatus(fmt.Errorf("resume the device of volume %s left suspended by an interrupted change: %w", id, err))
}

func (s *NodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             s.nodeID,
		MaxVolumesPerNode:  s.maxVolumesPerNode,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{v1alpha1.TopologyKeyNode: s.nodeID}},
	}, nil
}

func (s *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	caps := rpcCapabilities(nodeCapability,
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	)
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}
