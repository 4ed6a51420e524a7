package cluster

import (
	"context"
	"path/filepath"
	"strings"
	"time"
)

// startControlPlane starts etcd and the apiserver on the host, inside the
// namespace, waits for /readyz, then starts the controller-manager and the
// scheduler.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	if err := c.startDaemon("etcd", filepath.Join(c.cfg.EnvtestBin, "etcd"), c.etcdArgs()...); err != nil {
		return err
	}
	if err := c.startDaemon("kube-apiserver", filepath.Join(c.cfg.EnvtestBin, "kube-apiserver"), c.apiserverArgs()...); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	for name, args := range map[string][]string{
		"kube-controller-manager": {
			"--kubeconfig=" + c.pki("controller-manager.kubeconfig"),
			"--authentication-kubeconfig=" + c.pki("controller-manager.kubeconfig"),
			"--authorization-kubeconfig=" + c.pki("controller-manager.kubeconfig"),
			"--bind-address=127.0.0.1", "--service-account-private-key-file=" + c.pki("ca.key"),
			"--root-ca-file=" + c.pki("ca.crt"), "--cluster-signing-cert-file=" + c.pki("ca.crt"),
			"--cluster-signing-key-file=" + c.pki("ca.key"), "--use-service-account-credentials=true",
			"--allocate-node-cidrs=true", "--cluster-cidr=" + ClusterCIDR, "--service-cluster-ip-range=" + ServiceCIDR,
			"--leader-elect=false", "--profiling=false", "--v=1",
		},
		"kube-scheduler": {
			"--kubeconfig=" + c.pki("scheduler.kubeconfig"),
			"--authentication-kubeconfig=" + c.pki("scheduler.kubeconfig"),
			"--authorization-kubeconfig=" + c.pki("scheduler.kubeconfig"),
			"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false", "--v=1",
		},
	} {
		if err := c.startDaemon(name, filepath.Join(c.cfg.Bin, name), args...); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) etcdArgs() []string {
	return []string{
		"--name=e2e", "--data-dir=" + filepath.Join(c.cfg.WorkDir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=e2e=http://127.0.0.1:2380",
		// A throwaway cluster: durability is not what is tested.
		"--unsafe-no-fsync", "--log-level=warn",
	}
}

func (c *Cluster) apiserverArgs() []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:2379", "--bind-address=0.0.0.0", "--advertise-address=" + HostIP,
		"--secure-port=6443", "--service-cluster-ip-range=" + ServiceCIDR,
		"--client-ca-file=" + c.pki("ca.crt"),
		"--tls-cert-file=" + c.pki("apiserver.crt"), "--tls-private-key-file=" + c.pki("apiserver.key"),
		"--kubelet-client-certificate=" + c.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + c.pki("apiserver-kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		// The CA's key signs the tokens too (see writePKI); the private key
		// file serves as the public one.
		"--service-account-key-file=" + c.pki("ca.key"), "--service-account-signing-key-file=" + c.pki("ca.key"),
		// The node's name resolves nowhere; the apiserver reaches kubelet by IP.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--v=1",
	}
}

// waitAPIServer waits, until ctx ends, for the apiserver's /readyz, or for
// etcd or the apiserver to exit. Start's error adds the end of its log.
func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return c.Poll(ctx, "kube-apiserver's /readyz", 500*time.Millisecond, func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
		if err == nil {
			return true, "", nil
		}
		for _, p := range c.daemons {
			if err := p.exited(); err != nil {
				return false, "", err
			}
		}
		return false, strings.TrimSpace(out + " " + err.Error()), nil
	})
}
