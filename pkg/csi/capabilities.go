package csi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ssdcache/ssdcache/pkg/api/v1alpha1"
)

// Volumes are node-local: every single-node access mode works, no
// multi-node one does.
var accessModes = []csi.VolumeCapability_AccessMode_Mode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
}

// volumeKind is how a volume is presented to a workload.
type volumeKind struct {
	block    bool
	fsType   string
	flags    []string
	readOnly bool
	// singleWriter allows one publication at a time (SINGLE_NODE_SINGLE_WRITER).
	singleWriter bool
}

// checkCapability validates one capability and says how to present the volume.
func checkCapability(c *csi.VolumeCapability) (volumeKind, error) {
	if c == nil {
		return volumeKind{}, fmt.Errorf("volume capability is required")
	}
	mode := c.GetAccessMode().GetMode()
	if !slices.Contains(accessModes, mode) {
		return volumeKind{}, fmt.Errorf("access mode %s: volumes are local to one node; allowed modes are %s", mode, modeNames())
	}
	kind := volumeKind{
		readOnly:     mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		singleWriter: mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
	}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		kind.block = true
	case *csi.VolumeCapability_Mount:
		kind.fsType = t.Mount.GetFsType()
		if kind.fsType == "" {
			kind.fsType = defaultFSType
		}
		if !slices.Contains(v1alpha1.FSTypes, kind.fsType) {
			return volumeKind{}, fmt.Errorf("filesystem %q: allowed are %s", kind.fsType, strings.Join(v1alpha1.FSTypes, ", "))
		}
		kind.flags = t.Mount.GetMountFlags()
	default:
		return volumeKind{}, fmt.Errorf("volume capability needs an access type: block or mount")
	}
	return kind, nil
}

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return fmt.Errorf("volume capabilities are required")
	}
	for _, c := range caps {
		if _, err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func modeNames() string {
	names := make([]string, 0, len(accessModes))
	for _, m := range accessModes {
		names = append(names, m.String())
	}
	return strings.Join(names, ", ")
}

// rpcCapabilities turns a service's RPC capability types into the messages
// its GetCapabilities call returns.
func rpcCapabilities[T any, C any](wrap func(T) C, types ...T) []C {
	caps := make([]C, 0, len(types))
	for _, t := range types {
		caps = append(caps, wrap(t))
	}
	return caps
}

func controllerCapability(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
	return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
}

func nodeCapability(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
}
