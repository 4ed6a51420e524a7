package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
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
// under Dir. The issued certificates are valid for a day: the PKI lives as
// long as one test run.
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
		certPEM, keyPEM, err := p.issue(id, serverIPs)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", id.name, err)
		}
		if !id.server {
			if err := p.writeKubeconfig(id.name, serverURL, certPEM, keyPEM); err != nil {
				return nil, err
			}
		}
	}
	return p, p.writeServiceAccountKey()
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
	// An hour back, as for the issued certificates. client-go fixes the
	// CA's end at ten years; the one-day certificates bound every chain.
	cfg := certutil.Config{CommonName: "ssdcache-e2e-ca", NotBefore: time.Now().Add(-time.Hour)}
	if p.caCert, err = certutil.NewSelfSignedCACert(cfg, key); err != nil {
		return err
	}
	p.caKey = key
	_, _, err = p.writePair("ca", p.caCert, key)
	return err
}

// issue signs id's certificate with the CA and writes it and its key.
// client-go only makes self-signed certificates, so signing with the CA
// is x509.CreateCertificate here.
func (p *PKI) issue(id identity, serverIPs []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: id.cn},
		// An hour back: the guest's clock need not agree with the host's.
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
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return p.writePair(id.name, cert, key)
}

// writePair writes <name>.crt and <name>.key and returns their PEM.
func (p *PKI) writePair(name string, cert *x509.Certificate, key crypto.PrivateKey) (certPEM, keyPEM []byte, err error) {
	if certPEM, err = certutil.EncodeCertificates(cert); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	if err := certutil.WriteCert(p.Path(name+".crt"), certPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, keyutil.WriteKey(p.Path(name+".key"), keyPEM)
}

// writeKubeconfig embeds the certificates, so that the same file works on
// the host and in the guest, where the PKI directory has another path.
func (p *PKI) writeKubeconfig(name, serverURL string, certPEM, keyPEM []byte) error {
	caPEM, err := certutil.EncodeCertificates(p.caCert)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	cfg.CurrentContext = "e2e"
	return clientcmd.WriteToFile(*cfg, p.Kubeconfig(name))
}

// writeServiceAccountKey writes sa.key, with which the apiserver and the
// controller-manager sign service-account tokens, and sa.pub, with which
// the apiserver checks them.
func (p *PKI) writeServiceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := keyutil.WriteKey(p.Path("sa.key"), keyPEM); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	// keyutil reads public keys but has no writer for them.
	return os.WriteFile(p.Path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: pub}), 0o644)
}
