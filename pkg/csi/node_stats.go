package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/ssdcache/ssdcache/pkg/cache"
	"github.com/ssdcache/ssdcache/pkg/dm"
)

func (s *NodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	if path == "" {
		return nil, invalid("volume_path is required")
	}
	exists, isDir, err := s.mounter.Stat(path)
	if err != nil {
		return nil, toStatus(err)
	}
	if !exists {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", path)
	}
	if cache.ValidateVolumeID(id) != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	table, staged, err := s.engine.LiveTable(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if !staged {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged on this node", id)
	}
	if !isDir {
		// A raw block volume: its size is the dm device's.
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: int64(table.Length * dm.SectorSize)}}}, nil
	}
	fs, err := s.mounter.FSStats(path)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: fs.TotalBytes, Available: fs.AvailableBytes, Used: fs.UsedBytes},
		{Unit: csi.VolumeUsage_INODES, Total: fs.TotalInodes, Available: fs.FreeInodes, Used: fs.UsedInodes},
	}}, nil
}

func (s *NodeServer) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, path := req.GetVolumeId(), req.GetVolumePath()
	if id == "" {
		return nil, invalid("volume_id is required")
	}
	if path == "" {
		return nil, invalid("volume_path is required")
	}
	if cache.ValidateVolumeID(id) != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	if !s.locks.TryAcquire(id) {
		return nil, busy(id)
	}
	defer s.locks.Release(id)
	origin, err := s.engine.OriginLV(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.engine.Grow(ctx, id, origin); err != nil {
		return nil, toStatus(err)
	}
	if err := s.resizeFilesystem(id, path, req.GetVolumeCapability()); err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: int64(origin.Bytes)}, nil
}

// resizeFilesystem grows the filesystem of a mounted volume; a raw block
// volume has none.
func (s *NodeServer) resizeFilesystem(id, path string, c *csi.VolumeCapability) error {
	if c.GetBlock() != nil {
		return nil
	}
	mounted, err := s.mounter.IsMountPoint(path)
	if err != nil || !mounted {
		return err
	}
	klog.InfoS("Resizing filesystem", "volumeID", id, "path", path)
	return s.mounter.ResizeFS(cache.DevicePath(id), path)
}
