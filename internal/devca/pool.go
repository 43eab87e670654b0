package devca

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// CAPool reads the PEM certificates in path (one CA, or several while a CA is rotated) into
// a pool; a file holding none is an error.
func CAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// ClientConfig is a TLS 1.3 client configuration that trusts the CA in caDir (ca.crt), checks
// the server name serverName, and presents the certificate name from certDir (none when name
// is ""), as Make wrote them: for tests and tools that call a node as one of its peers, an
// operator, or an outsider.
func ClientConfig(caDir, certDir, name, serverName string) (*tls.Config, error) {
	pool, err := CAPool(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}
	if name != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, name+".crt"), filepath.Join(certDir, name+".key"))
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
