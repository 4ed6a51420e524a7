package cluster

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func TestPKIClientsChainToTheCAWithTheirGroups(t *testing.T) {
	dir := t.TempDir()
	p, err := NewPKI(dir, "https://"+HostIP+":6443", "n1", []net.IP{net.ParseIP(HostIP)})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.Path("ca.crt")))
	api := readCert(t, p.Path("apiserver.crt"))
	if _, err := api.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("apiserver certificate: %v", err)
	}
	if err := api.VerifyHostname(ServiceAPIIP); err != nil {
		t.Errorf("apiserver certificate must cover the service IP pods use: %v", err)
	}
	for _, id := range clientIdentities("n1") {
		cfg, err := clientcmd.LoadFromFile(p.Kubeconfig(id.name))
		if err != nil {
			t.Fatalf("%s kubeconfig: %v", id.name, err)
		}
		auth := cfg.AuthInfos[id.name]
		block, _ := pem.Decode(auth.ClientCertificateData)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", id.name, err)
		}
		if cert.Subject.CommonName != id.cn || (id.org != "" && cert.Subject.Organization[0] != id.org) {
			t.Errorf("%s: subject %v, want CN=%s O=%s", id.name, cert.Subject, id.cn, id.org)
		}
	}
	if c := readCert(t, p.Path("kubelet.crt")); c.Subject.CommonName != "system:node:n1" {
		t.Errorf("kubelet CN %q: the Node authorizer needs system:node:<name>", c.Subject.CommonName)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNodeConfigsParse(t *testing.T) {
	dir := t.TempDir()
	if err := writeNodeConfigs(dir, "n1", "localhost/pause:1"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kubelet.yaml", "kube-proxy.yaml"} {
		var v map[string]any
		raw, _ := os.ReadFile(filepath.Join(dir, f))
		if err := yaml.UnmarshalStrict(raw, &v); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	var cni map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, "10-e2e.conflist"))
	if err := json.Unmarshal(raw, &cni); err != nil {
		t.Errorf("CNI config: %v", err)
	}
	toml, _ := os.ReadFile(filepath.Join(dir, "containerd.toml"))
	if !strings.Contains(string(toml), `sandbox = "localhost/pause:1"`) {
		t.Errorf("containerd config does not pin the pause image:\n%s", toml)
	}
	if !strings.Contains(string(raw), PodCIDR) {
		t.Errorf("CNI config lacks the pod CIDR %s", PodCIDR)
	}
}

func TestPollSaysWhatItSawLast(t *testing.T) {
	c := &Cluster{} // no VM booted
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	n := 0
	err := c.poll(ctx, "the answer", 10*time.Millisecond, func() (bool, string, error) {
		n++
		return false, fmt.Sprintf("look %d", n), nil
	})
	if err == nil || !strings.Contains(err.Error(), "the answer: not within") || !strings.Contains(err.Error(), "last seen: look") {
		t.Fatalf("poll: %v", err)
	}
	giveUp := errors.New("it cannot come any more")
	if err := c.poll(context.Background(), "the answer", time.Millisecond, func() (bool, string, error) {
		return false, "", giveUp
	}); !errors.Is(err, giveUp) {
		t.Fatalf("poll after check's error: %v", err)
	}
}
