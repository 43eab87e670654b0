// Package devca makes a development cluster CA and certificates for kvoffload nodes and
// operators (`storenode certs`, and tests). A node's certificate has its ID as Common Name
// and both server and client usage; an operator's has OU OperatorUnit and client usage.
// Keys are ECDSA P-256 (crypto/ecdsa), written 0600. Production clusters use their own PKI
// with the same shape (docs/security.md).
package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// OperatorUnit is the Subject Organizational Unit that marks an operator's certificate
// (node.OperatorUnit is the same value).
const OperatorUnit = "kvoffload-operator"

// Options say what Make writes.
type Options struct {
	Dir       string        // directory for the CA and certificates (created)
	Nodes     []string      // node IDs: server and client certificates, Common Name = ID
	Operators []string      // operator names: client certificates with OU OperatorUnit
	Hosts     []string      // IP addresses and DNS names put in node certificates
	Valid     time.Duration // validity of new certificates
}

// Make writes the CA (reused when Dir has one) and every certificate not yet in Dir,
// reporting each file on w.
func Make(f Options, w io.Writer) error {
	if len(f.Nodes) == 0 && len(f.Operators) == 0 {
		return errors.New("devca: name at least one node (--nodes) or operator (--operators)")
	}
	if err := os.MkdirAll(f.Dir, 0o750); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	ca, caKey, err := loadOrMakeCA(f.Dir, f.Valid, w)
	if err != nil {
		return err
	}
	for _, id := range f.Nodes {
		if err := makeLeaf(f, ca, caKey, id, false, w); err != nil {
			return err
		}
	}
	for _, name := range f.Operators {
		if err := makeLeaf(f, ca, caKey, name, true, w); err != nil {
			return err
		}
	}
	return nil
}

func loadOrMakeCA(dir string, valid time.Duration, w io.Writer) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	crtPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if crtPEM, err := os.ReadFile(crtPath); err == nil {
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, fmt.Errorf("devca: %s exists but its key does not: %w", crtPath, err)
		}
		crt, key, err := parsePair(crtPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("devca: %s: %w", crtPath, err)
		}
		fmt.Fprintf(w, "using the CA in %s\n", crtPath)
		return crt, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kvoffload cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(valid),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(crtPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	crt, _ := x509.ParseCertificate(der)
	fmt.Fprintf(w, "wrote the CA %s\n", crtPath)
	return crt, key, nil
}

func makeLeaf(f Options, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, operator bool, w io.Writer) error {
	if name == "" || strings.ContainsAny(name, "/\\") {
		return fmt.Errorf("devca: %q is not a usable name", name)
	}
	crtPath, keyPath := filepath.Join(f.Dir, name+".crt"), filepath.Join(f.Dir, name+".key")
	if _, err := os.Stat(crtPath); err == nil {
		fmt.Fprintf(w, "kept %s (exists)\n", crtPath)
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(f.Valid),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if operator {
		tmpl.Subject.OrganizationalUnit = []string{OperatorUnit}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		for _, h := range f.Hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePair(crtPath, keyPath, der, key); err != nil {
		return err
	}
	kind := "node"
	if operator {
		kind = "operator"
	}
	fmt.Fprintf(w, "wrote %s certificate %s\n", kind, crtPath)
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	if err := os.WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	return nil
}

func parsePair(crtPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	crt, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return crt, key, nil
}
