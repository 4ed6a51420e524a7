package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// identity is one client or server certificate of the throwaway PKI.
type identity struct {
	name   string // file stem: <name>.crt, <name>.key, <name>.kubeconfig
	cn     string
	org    string
	server bool
}

// clientIdentities get a kubeconfig each. Their names and groups are the ones
// the default RBAC roles bind (system:kube-controller-manager, system:nodes...).
func clientIdentities(node string) []identity {
	return []identity{
		{name: "admin", cn: "e2e-admin", org: "system:masters"},
		{name: "kubelet", cn: "system:node:" + node, org: "system:nodes"},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", org: "system:masters"},
	}
}

// PKI is a CA, the apiserver's serving certificate, one client certificate
// and kubeconfig per component, and the service-account signing key, all
// under Dir. Valid for a day: it lives as long as one test run.
type PKI struct {
	Dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

// NewPKI writes the PKI for an apiserver at serverURL reachable at serverIPs.
func NewPKI(dir, serverURL, node string, serverIPs []net.IP) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	if err := p.makeCA(); err != nil {
		return nil, err
	}
	ids := append(clientIdentities(node), identity{name: "apiserver", cn: "kube-apiserver", server: true})
	for _, id := range ids {
		if err := p.issue(id, serverIPs); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", id.name, err)
		}
		if !id.server {
			if err := p.writeKubeconfig(id.name, serverURL); err != nil {
				return nil, err
			}
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.Path("sa.key"), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	return p, writePEM(p.Path("sa.pub"), "PUBLIC KEY", pub)
}

// Path is a file of the PKI: ca.crt, apiserver.key, admin.kubeconfig, ...
func (p *PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// Kubeconfig is the kubeconfig of a client identity (admin, kubelet, ...).
func (p *PKI) Kubeconfig(name string) string { return p.Path(name + ".kubeconfig") }

func (p *PKI) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ssdcache-e2e-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	p.caKey = key
	if err := writePEM(p.Path("ca.crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.Path("ca.key"), key)
}

func (p *PKI) issue(id identity, serverIPs []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: id.cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if id.org != "" {
		tmpl.Subject.Organization = []string{id.org}
	}
	if id.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ServiceAPIIP)}, serverIPs...)
		tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return err
	}
	if err := writePEM(p.Path(id.name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.Path(id.name+".key"), key)
}

// writeKubeconfig embeds the certificates, so that the same file works on
// the host and in the guest, where the PKI directory has another path.
func (p *PKI) writeKubeconfig(name, serverURL string) error {
	var data [3]string
	for i, f := range []string{"ca.crt", name + ".crt", name + ".key"} {
		b, err := os.ReadFile(p.Path(f))
		if err != nil {
			return err
		}
		data[i] = base64.StdEncoding.EncodeToString(b)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: %s, user: {client-certificate-data: %s, client-key-data: %s}}]
contexts: [{name: e2e, context: {cluster: e2e, user: %s}}]
current-context: e2e
`, serverURL, data[0], name, data[1], data[2], name)
	return os.WriteFile(p.Kubeconfig(name), []byte(cfg), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
