// Package guest is the guest half make demo and make bench share: it runs the
// real ssdcache-node inside the VM and drives it through the CSI gRPC API the
// way a cluster would (CreateVolume as external-provisioner calls it,
// NodeStageVolume and NodePublishVolume as kubelet calls them, with kubelet's
// directory layout), runs system tools, cuts the VM disks into partitions
// and parses the flags every guest program takes from job.Job.
package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// PluginConfig says how to start ssdcache-node.
type PluginConfig struct {
	// Binary is the ssdcache-node executable.
	Binary string
	// OriginDevices and CacheDevices are /dev/disk/by-id paths of the pools.
	OriginDevices, CacheDevices []string
	// Socket is the CSI endpoint's unix socket path.
	Socket string
	// LogPath receives the plugin's stdout and stderr.
	LogPath string
	// NodeName is the CSI node ID.
	NodeName string
	// StateDir is --state-dir, where the plugin keeps hot sets; empty: its default.
	StateDir string
	// AppendLog goes on with an existing log instead of starting it anew.
	AppendLog bool
}

// Plugin is a running ssdcache-node and a CSI client connected to it.
type Plugin struct {
	cfg  PluginConfig
	proc *Process
	log  *os.File
	csi  *Clients
}

// StartPlugin runs ssdcache-node without the node agent (there is no API
// server in the VM) and waits until it answers Probe.
func StartPlugin(ctx context.Context, cfg PluginConfig) (*Plugin, error) {
	logFlag := os.O_TRUNC
	if cfg.AppendLog {
		logFlag = os.O_APPEND
	}
	log, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return nil, err
	}
	args := append(NodeArgs(cfg.NodeName, cfg.Socket), "--health-probe-address=127.0.0.1:9811")
	for _, d := range cfg.OriginDevices {
		args = append(args, "--origin-devices="+d)
	}
	for _, d := range cfg.CacheDevices {
		args = append(args, "--cache-devices="+d)
	}
	if cfg.StateDir != "" {
		args = append(args, "--state-dir="+cfg.StateDir)
	}
	p := &Plugin{cfg: cfg, log: log}
	if p.proc, err = StartProcess(cfg.Binary, args, log); err != nil {
		log.Close()
		return nil, err
	}
	if err := p.waitReady(ctx); err != nil {
		p.Stop()
		return nil, fmt.Errorf("ssdcache-node did not come up (log %s): %w", cfg.LogPath, err)
	}
	return p, nil
}

// Restart stops the plugin with SIGTERM and starts it again with the same
// configuration, as a DaemonSet rollout replaces its pod; staged volumes
// stay as they are, and the log goes on in the same file. It returns how
// long the old process took to stop and the new one to answer Probe.
func (p *Plugin) Restart(ctx context.Context) (down, up time.Duration, err error) {
	start := time.Now()
	p.Stop()
	down = time.Since(start)
	cfg := p.cfg
	cfg.AppendLog = true
	next, err := StartPlugin(ctx, cfg)
	if err != nil {
		return down, 0, err
	}
	*p = *next
	return down, time.Since(start) - down, nil
}

func (p *Plugin) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if exited, err := p.proc.Exited(); exited {
			return fmt.Errorf("exited: %v", err)
		}
		if _, err := os.Stat(p.cfg.Socket); err == nil {
			p.csi, err = Connect(ctx, p.cfg.Socket)
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no socket %s: %w", p.cfg.Socket, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// LogPath is the file the plugin logs to.
func (p *Plugin) LogPath() string { return p.cfg.LogPath }

// Stop ends the plugin with SIGTERM, as a pod deletion would.
func (p *Plugin) Stop() {
	if p.csi != nil {
		_ = p.csi.Conn.Close()
	}
	_ = p.proc.Stop(20*time.Second, nil)
	p.log.Close()
}

// Volume is a provisioned volume and where kubelet stages and publishes it.
type Volume struct {
	ID         string
	Context    map[string]string
	Capability *csi.VolumeCapability
	Staging    string
	Target     string
}

// BlockCapability is a raw block volume for one node, as a PVC with
// volumeMode: Block and ReadWriteOnce asks for.
func BlockCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// ReadCacheParams are the StorageClass parameters of a cached volume.
func ReadCacheParams(cacheSize string) map[string]string {
	return map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": cacheSize}
}

// Kubelet's block-volume paths: a staging dir per PV and a publish file per
// pod (pkg/volume/csi in kubelet).
const (
	kubeletBlockStaging = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging"
	kubeletBlockPublish = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish"
	podUID              = "8a0c6d5e-0000-4000-8000-0000000000de"
)

// CreateVolume provisions a volume as external-provisioner does for a PVC
// named pvName of the given size and StorageClass parameters.
func (p *Plugin) CreateVolume(ctx context.Context, pvName string, bytes int64, params map[string]string, c *csi.VolumeCapability) (*Volume, error) {
	resp, err := p.csi.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: pvName, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}, Parameters: params,
		VolumeCapabilities: []*csi.VolumeCapability{c},
	})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", pvName, err)
	}
	return &Volume{
		ID: resp.Volume.VolumeId, Context: resp.Volume.VolumeContext, Capability: c,
		Staging: filepath.Join(kubeletBlockStaging, pvName),
		Target:  filepath.Join(kubeletBlockPublish, pvName, podUID),
	}, nil
}

// StageAndPublish calls NodeStageVolume and NodePublishVolume as kubelet
// does when a pod using the volume starts; kubelet creates the staging dir
// and the target's parent, the plugin creates the target itself.
func (p *Plugin) StageAndPublish(ctx context.Context, v *Volume) error {
	for _, dir := range []string{v.Staging, filepath.Dir(v.Target)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	if _, err := p.csi.Node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: v.ID, StagingTargetPath: v.Staging, VolumeCapability: v.Capability, VolumeContext: v.Context,
	}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.ID, err)
	}
	if _, err := p.csi.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.ID, StagingTargetPath: v.Staging, TargetPath: v.Target, VolumeCapability: v.Capability, VolumeContext: v.Context,
	}); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", v.ID, err)
	}
	return nil
}

// Unstage unpublishes and unstages the volume, as kubelet does when the
// last pod using it on the node is deleted.
func (p *Plugin) Unstage(ctx context.Context, v *Volume) error {
	if _, err := p.csi.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: v.Target}); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s: %w", v.ID, err)
	}
	if _, err := p.csi.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.ID, StagingTargetPath: v.Staging}); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", v.ID, err)
	}
	return nil
}

// Delete unstages and deletes the volume, as kubelet and
// external-provisioner do when the pod and then the PVC are deleted.
func (p *Plugin) Delete(ctx context.Context, v *Volume) error {
	if err := p.Unstage(ctx, v); err != nil {
		return err
	}
	if _, err := p.csi.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.ID}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", v.ID, err)
	}
	return nil
}

// DMName is the dm device a staged volume is served from (README, "How it works").
func DMName(volumeID string) string { return "ssdcache-" + volumeID }
