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
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// The cluster's throwaway PKI, in one directory: a CA (ca.crt, ca.key), the
// apiserver's serving certificate (apiserver.crt, .key), and for each client
// identity a certificate (<name>.crt, .key) and a kubeconfig embedding it
// (<name>.kubeconfig). The CA's key also signs service-account tokens:
// nothing of this PKI outlives the run.

// identity is a client of the apiserver. The names and groups are the ones
// the default RBAC roles bind (system:kube-controller-manager, system:nodes...).
type identity struct {
	name, cn string // name is the file stem
	orgs     []string
}

func clientIdentities(node string) []identity {
	masters := []string{"system:masters"}
	return []identity{
		{name: "admin", cn: "e2e-admin", orgs: masters},
		{name: "kubelet", cn: "system:node:" + node, orgs: []string{"system:nodes"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
		{name: "kube-proxy", cn: "system:kube-proxy"},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: masters},
	}
}

// writePKI writes the PKI into dir for an apiserver at serverURL, which the
// serving certificate covers by serverIP, its Service IP and DNS names.
func writePKI(dir, serverURL, node string, serverIP net.IP) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	// From an hour back, as the issued certificates. client-go fixes the CA's
	// end at ten years; the one-day certificates bound every chain.
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "ssdcache-e2e-ca", NotBefore: time.Now().Add(-time.Hour)}, caKey)
	if err != nil {
		return err
	}
	caPEM, _, err := writePair(dir, "ca", ca.Raw, caKey)
	if err != nil {
		return err
	}
	server := &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ServiceAPIIP), serverIP},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}
	if _, _, err := issue(dir, "apiserver", server, ca, caKey); err != nil {
		return err
	}
	for _, id := range clientIdentities(node) {
		client := &x509.Certificate{Subject: pkix.Name{CommonName: id.cn, Organization: id.orgs},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		certPEM, keyPEM, err := issue(dir, id.name, client, ca, caKey)
		if err != nil {
			return err
		}
		// Embedded certificates: the same file works on the host and in the
		// guest, where the directory has another path.
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: caPEM}
		cfg.AuthInfos[id.name] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
		cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: id.name}
		cfg.CurrentContext = "e2e"
		if err := clientcmd.WriteToFile(*cfg, filepath.Join(dir, id.name+".kubeconfig")); err != nil {
			return err
		}
	}
	return nil
}

// issue completes tmpl into a one-day certificate for a new key, signs it
// with the CA (client-go only makes self-signed ones) and writes both.
func issue(dir, name string, tmpl, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	// An hour back: the guest's clock need not agree with the host's. A nil
	// SerialNumber is a random one.
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate %s: %w", name, err)
	}
	return writePair(dir, name, der, key)
}

// writePair writes <name>.crt (of the certificate's DER) and <name>.key and
// returns their PEM.
func writePair(dir, name string, der []byte, key crypto.PrivateKey) (certPEM, keyPEM []byte, err error) {
	certPEM = pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})
	if keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, nil, err
	}
	if err := certutil.WriteCert(filepath.Join(dir, name+".crt"), certPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, keyutil.WriteKey(filepath.Join(dir, name+".key"), keyPEM)
}
