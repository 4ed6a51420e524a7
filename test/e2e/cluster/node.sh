#!/bin/bash
# The one node of the e2e cluster, run by the VM harness in the guest (cwd
# /vmwork): containerd, kubelet and kube-proxy, as on a kubeadm node without
# systemd. The harness prepends the variables E2E_BIN, NODE_NAME, NODE_IP,
# HOST_IP and NODE_MAC (the pod CIDR is in the CNI config). Afterwards it serves /vmwork/cmd: each NAME.sh dropped
# there runs as root on the node, its output in NAME.out and exit code in
# NAME.rc; the file STOP ends the node and powers the guest off.
set -u
export PATH=$E2E_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
W=/vmwork; C=$W/node; L=$W/logs
mkdir -p $L $W/cmd
note() { echo "[$(cut -d' ' -f1 /proc/uptime)s] $*"; }
note "node boot"

# What systemd and a container-ready distribution would have done.
mount -t cgroup2 none /sys/fs/cgroup
echo "+cpu +cpuset +io +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
for d in /var/lib/containerd /var/lib/kubelet /var/log/pods /var/log/containers; do
  mkdir -p $d && mount -t tmpfs tmpfs $d
done
# Bidirectional mount propagation (the node plugin's kubelet dir) needs it.
mount --make-rshared /
hostname "$NODE_NAME"
echo "nameserver 127.0.0.1" > /etc/resolv.conf
printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE_NAME" > /etc/hosts
modprobe -a virtio_net overlay bridge br_netfilter veth nf_conntrack nf_tables nft_compat nft_chain_nat \
  xt_MASQUERADE xt_conntrack xt_comment xt_mark xt_addrtype xt_nat xt_statistic xt_multiport || note "modprobe failed"
# udevd renames the NIC (enp0sN); find it by the MAC the harness gave it.
NIC=$(grep -il "$NODE_MAC" /sys/class/net/*/address | head -1 | xargs -r dirname | xargs -r basename)
[ -n "$NIC" ] || { note "no NIC with MAC $NODE_MAC: $(ls /sys/class/net)"; exit 1; }
ip link set lo up && ip link set "$NIC" up && ip addr add "$NODE_IP/24" dev "$NIC" &&
  ip route add default via "$HOST_IP" || { note "network setup of $NIC failed"; exit 1; }
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
rm -rf /etc/cni/net.d && mkdir -p /etc/cni/net.d && cp $C/10-e2e.conflist /etc/cni/net.d/
note "node set up"

# The node's daemons in a cgroup of their own, as systemd's system.slice
# holds them on a real node. In the root cgroup each of their threads
# competes with the whole kubepods tree as its equal: while kubelet and
# containerd start a pod's containers, the pods are starved, and a new
# csi-provisioner (27 s to its first log line, seen once) can miss the one
# second csi-lib-utils gives its first connection, then exits as on a lost
# connection (TestSidecarFirstConnection measures both placements). This
# shell moves, so all it starts follows.
mkdir -p /sys/fs/cgroup/system.slice
echo $$ > /sys/fs/cgroup/system.slice/cgroup.procs
containerd --config $C/containerd.toml > $L/containerd.log 2>&1 &
CONTAINERD=$!
until ctr version > /dev/null 2>&1; do sleep 0.5; done
note "containerd up"
import() { ctr -n k8s.io images import --platform linux/amd64 "$1" > /dev/null || note "import of $1 failed"; }
# The sandbox image first: kubelet needs it to run any pod. The others
# (minutes under emulation) are imported while kubelet registers the node.
import $W/images/pause.tar

kubelet --config=$C/kubelet.yaml --kubeconfig=$W/pki/kubelet.kubeconfig --hostname-override="$NODE_NAME" \
  --node-ip="$NODE_IP" --root-dir=/var/lib/kubelet --v=1 > $L/kubelet.log 2>&1 &
KUBELET=$!
kube-proxy --config=$C/kube-proxy.yaml --v=1 > $L/kube-proxy.log 2>&1 &
PROXY=$!
note "kubelet and kube-proxy started"
echo started > $W/node-started
for f in $W/images/*.tar; do [ "$f" = $W/images/pause.tar ] || import "$f"; done
note "images: $(ctr -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' ')"
touch $W/images-imported

while [ ! -e $W/cmd/STOP ]; do
  for f in $W/cmd/*.sh; do
    [ -e "$f" ] || continue
    n=${f%.sh}; mv "$f" "$n.run"
    bash "$n.run" > "$n.out" 2>&1; echo $? > "$n.rc.tmp"; mv "$n.rc.tmp" "$n.rc"; rm -f "$n.run"
  done
  sleep 0.3
done
note "stopping"
kill $PROXY $KUBELET 2> /dev/null; sleep 2; kill $CONTAINERD 2> /dev/null; sleep 1
