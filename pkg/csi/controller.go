package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/lvm"
)

const (
	// defaultVolumeBytes is used when a request names no size.
	defaultVolumeBytes = 1 << 30
	// extentBytes is the allocation unit of the HDD pool.
	extentBytes = 4 << 20
)

// ControllerServer provisions origin LVs in this node's HDD pool. It runs
// beside external-provisioner --node-deployment on every node.
type ControllerServer struct {
	csi.UnimplementedControllerServer
	nodeID   string
	originVG string
	lvm      lvm.Interface
	engine   *cache.Engine
	locks    *cache.VolumeLocks
}

// VolumeIDFor derives a volume ID from a CreateVolume name: the name itself
// when it can name an LV and a dm device, else a stable hash of it, so a
// repeated CreateVolume finds the same volume without any stored state.
func VolumeIDFor(name string) string {
	if len(name) <= 64 && cache.ValidateVolumeID(name) == nil {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "vol-" + hex.EncodeToString(sum[:16])
}

// createPlan is a validated CreateVolume request.
type createPlan struct {
	id     string
	size   uint64
	limit  uint64
	params volumeParams
}

func (s *ControllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	p, err := s.validateCreate(req)
	if err != nil {
		return nil, err
	}
	if !s.locks.TryAcquire(p.id) {
		return nil, busy(p.id)
	}
	defer s.locks.Release(p.id)
	lv, err := s.ensureOriginLV(ctx, p)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           p.id,
		CapacityBytes:      int64(lv.Size),
		VolumeContext:      volumeContext(p.params, req.GetParameters()),
		AccessibleTopology: []*csi.Topology{{Segments: map[string]string{v1alpha1.TopologyKeyNode: s.nodeID}}},
	}}, nil
}

func (s *ControllerServer) validateCreate(req *csi.CreateVolumeRequest) (createPlan, error) {
	if req.GetName() == "" {
		return createPlan{}, invalid("name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return createPlan{}, invalid("volume_capabilities: %v", err)
	}
	if req.GetVolumeContentSource() != nil {
		return createPlan{}, invalid("volume_content_source: snapshots and clones are not supported")
	}
	params, err := parseParams(req.GetParameters(), false)
	if err != nil {
		return createPlan{}, invalid("%v", err)
	}
	size, limit, err := sizeFor(req.GetCapacityRange())
	if err != nil {
		return createPlan{}, err
	}
	if err := s.checkTopology(req.GetAccessibilityRequirements()); err != nil {
		return createPlan{}, err
	}
	if err := s.checkCache(params, size); err != nil {
		return createPlan{}, invalid("%v", err)
	}
	return createPlan{id: VolumeIDFor(req.GetName()), size: size, limit: limit, params: params}, nil
}

// sizeFor rounds the requested size up to whole extents within the limit.
func sizeFor(r *csi.CapacityRange) (size, limit uint64, err error) {
	required, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || lim < 0 {
		return 0, 0, invalid("capacity_range: required_bytes=%d and limit_bytes=%d must not be negative", required, lim)
	}
	if lim > 0 && required > lim {
		return 0, 0, invalid("capacity_range: required_bytes=%d exceeds limit_bytes=%d", required, lim)
	}
	size = uint64(required)
	if size == 0 {
		size = defaultVolumeBytes
		if lim > 0 && uint64(lim) < size {
			size = uint64(lim)
		}
	}
	size = (size + extentBytes - 1) / extentBytes * extentBytes
	if lim > 0 && size > uint64(lim) {
		return 0, 0, status.Errorf(codes.OutOfRange, "capacity_range: %d bytes rounded up to whole %d-byte extents is %d, above limit_bytes=%d", required, extentBytes, size, lim)
	}
	return size, uint64(lim), nil
}

// checkCache refuses a cache this node could never give the volume, so the
// mistake surfaces on the PVC instead of as a silently uncached volume.
func (s *ControllerServer) checkCache(params volumeParams, size uint64) error {
	spec, err := params.cacheSpec(int64(size))
	if err != nil || spec == nil {
		return err
	}
	if _, err := s.engine.Pools().CacheVG(spec.Class); err != nil {
		return fmt.Errorf("parameter %s: %w", v1alpha1.ParamDeviceClass, err)
	}
	return nil
}

// checkTopology refuses requests that cannot be placed on this node.
func (s *ControllerServer) checkTopology(req *csi.TopologyRequirement) error {
	if len(req.GetRequisite()) == 0 {
		return nil
	}
	for _, t := range req.GetRequisite() {
		if t.GetSegments()[v1alpha1.TopologyKeyNode] == s.nodeID {
			return nil
		}
	}
	return status.Errorf(codes.ResourceExhausted, "accessibility_requirements: this plugin serves node %q only, which is not requisite", s.nodeID)
}

func (s *ControllerServer) ensureOriginLV(ctx context.Context, p createPlan) (lvm.LV, error) {
	lv, err := lvm.FindLV(ctx, s.lvm, s.originVG, p.id)
	if err == nil {
		if lv.Size < p.size || (p.limit > 0 && lv.Size > p.limit) {
			return lv, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes, incompatible with the requested %d (limit %d)", p.id, lv.Size, p.size, p.limit)
		}
		return lv, nil
	}
	if !errors.Is(err, lvm.ErrNotFound) {
		return lv, err
	}
	klog.InfoS("Creating origin volume", "volumeID", p.id, "bytes", p.size, "vg", s.originVG)
	return s.lvm.CreateLV(ctx, s.originVG, p.id, p.size, lvm.Tags(p.id, lvm.RoleOrigin))
}

func (s *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	if cache.ValidateVolumeID(id) != nil {
		return &csi.DeleteVolumeResponse{}, nil // no such volume can exist
	}
	if !s.locks.TryAcquire(id) {
		return nil, busy(id)
	}
	defer s.locks.Release(id)
	if st, err := s.engine.Inspect(ctx, id); err != nil {
		return nil, toStatus(err)
	} else if st.Staged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still staged on node %s; unstage it first", id, s.nodeID)
	}
	if err := s.deleteOrigin(ctx, id); err != nil {
		return nil, toStatus(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteOrigin removes the volume's origin LV (and any cache LVs left by a
// crash) and its hot set. An LV without our origin tag, or a static disk,
// is never touched.
func (s *ControllerServer) deleteOrigin(ctx context.Context, id string) error {
	if err := s.engine.Unstage(ctx, id); err != nil {
		return err
	}
	// The cache LVs a clean unstage kept for the next stage.
	if err := s.engine.Detach(ctx, id); err != nil {
		return err
	}
	if err := s.engine.ForgetHotSet(id); err != nil {
		return err
	}
	lv, err := lvm.FindLV(ctx, s.lvm, s.originVG, id)
	if errors.Is(err, lvm.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if lv.Volume() != id || lv.Role() != lvm.RoleOrigin {
		return fmt.Errorf("LV %s/%s is not tagged as the origin of volume %s; refusing to remove it: %w", s.originVG, id, id, lvm.ErrDeviceInUse)
	}
	klog.InfoS("Deleting origin volume", "volumeID", id)
	if err := s.lvm.RemoveLV(ctx, s.originVG, id); err != nil && !errors.Is(err, lvm.ErrNotFound) {
		return err
	}
	return nil
}

func (s *ControllerServer) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	size, _, err := sizeFor(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if req.GetCapacityRange().GetRequiredBytes() == 0 {
		return nil, invalid("capacity_range.required_bytes is required")
	}
	if !s.locks.TryAcquire(id) {
		return nil, busy(id)
	}
	defer s.locks.Release(id)
	lv, err := lvm.FindLV(ctx, s.lvm, s.originVG, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if lv.Size < size {
		klog.InfoS("Expanding origin volume", "volumeID", id, "from", lv.Size, "to", size)
		if err := s.lvm.ExtendLV(ctx, s.originVG, id, size); err != nil {
			return nil, toStatus(err)
		}
		lv.Size = size
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(lv.Size), NodeExpansionRequired: true}, nil
}

func (s *ControllerServer) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if seg := req.GetAccessibleTopology().GetSegments(); seg != nil && seg[v1alpha1.TopologyKeyNode] != s.nodeID {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	params, err := parseParams(req.GetParameters(), false)
	if err != nil {
		return nil, invalid("%v", err)
	}
	// A cached class's volume can only be created where its cache can be
	// carved (CreateVolume refuses it elsewhere): no capacity on other nodes
	// keeps the scheduler from choosing them.
	if _, err := s.engine.Pools().CacheVG(params.DeviceClass); params.Cached && err != nil {
		return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
	}
	vg, err := s.lvm.GetVG(ctx, s.originVG)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: int64(vg.Free)}, nil
}

func (s *ControllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalid("volume_capabilities are required")
	}
	if _, err := lvm.FindLV(ctx, s.lvm, s.originVG, req.GetVolumeId()); err != nil {
		return nil, toStatus(err)
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

func (s *ControllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := rpcCapabilities(controllerCapability,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	)
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}
