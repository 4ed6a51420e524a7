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

// Plugin is a running ssdcache-node and a CSI client connected to it.
type Plugin struct {
	binary, socket, logPath string
	args                    []string
	proc                    *Process
	log                     *os.File
	csi                     *Clients
}

// startPlugin runs binary with args (NodeArgs and more), serving CSI on
// socket, its output appended to logPath, and waits until it answers Probe.
func startPlugin(ctx context.Context, binary, socket, logPath string, args []string) (*Plugin, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &Plugin{binary: binary, socket: socket, logPath: logPath, args: args, log: log}
	if p.proc, err = StartProcess(binary, args, log); err != nil {
		log.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if p.csi, err = WaitReady(ctx, p.proc, socket); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%w (log %s)", err, logPath)
	}
	return p, nil
}

// Restart stops the plugin with SIGTERM and starts it again with the same
// flags, as a DaemonSet rollout replaces its pod; staged volumes stay as
// they are, and the log goes on in the same file. It returns how long the
// old process took to stop and the new one to answer Probe.
func (p *Plugin) Restart(ctx context.Context) (down, up time.Duration, err error) {
	start := time.Now()
	p.Stop()
	down = time.Since(start)
	next, err := startPlugin(ctx, p.binary, p.socket, p.logPath, p.args)
	if err != nil {
		return down, 0, err
	}
	*p = *next
	return down, time.Since(start) - down, nil
}

func (p *Plugin) LogPath() string { return p.logPath }

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
	ID, Staging, Target string
	Context             map[string]string
}

// blockVolume is the capability of a raw block volume for one node, as a PVC
// with volumeMode: Block and ReadWriteOnce asks for; the volumes the guests
// create are all such.
var blockVolume = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

// Kubelet's block-volume paths: a staging dir per PV and a publish file per
// pod (pkg/volume/csi in kubelet).
const (
	kubeletBlockStaging = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging"
	kubeletBlockPublish = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish"
	podUID              = "8a0c6d5e-0000-4000-8000-0000000000de"
)

// CreateVolume provisions a raw block volume with a read cache of
// cacheSize, as external-provisioner does for a PVC named pvName, and
// stages and publishes it, as kubelet does when a pod using it starts.
func (p *Plugin) CreateVolume(ctx context.Context, pvName string, bytes int64, cacheSize string) (*Volume, error) {
	resp, err := p.csi.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: pvName, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
		Parameters:         map[string]string{"ssdcache.io/cache-mode": "readcache", "ssdcache.io/cache-size": cacheSize},
		VolumeCapabilities: []*csi.VolumeCapability{blockVolume},
	})
	if err != nil {
		return nil, fmt.Errorf("CreateVolume %s: %w", pvName, err)
	}
	v := &Volume{
		ID: resp.Volume.VolumeId, Context: resp.Volume.VolumeContext,
		Staging: filepath.Join(kubeletBlockStaging, pvName),
		Target:  filepath.Join(kubeletBlockPublish, pvName, podUID),
	}
	return v, p.StageAndPublish(ctx, v)
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
		VolumeId: v.ID, StagingTargetPath: v.Staging, VolumeCapability: blockVolume, VolumeContext: v.Context,
	}); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", v.ID, err)
	}
	if _, err := p.csi.Node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: v.ID, StagingTargetPath: v.Staging, TargetPath: v.Target, VolumeCapability: blockVolume, VolumeContext: v.Context,
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
