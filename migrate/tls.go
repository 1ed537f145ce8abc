package migrate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The files of a TLS directory (docs/migration.md "Setting up the channel").
const (
	CAFile   = "ca.pem"   // the CA that signs every vgpud host's certificate
	CertFile = "cert.pem" // this host's certificate (server and client auth)
	KeyFile  = "key.pem"  // its private key
)

// ErrTLS wraps every problem with a TLS directory.
var ErrTLS = errors.New("migration tls")

// TLS is the mutual-TLS configuration of the channel between two vgpud
// daemons: each end presents a certificate signed by the operator's
// migration CA and accepts only peers whose certificate that CA signed.
type TLS struct {
	ca   *x509.CertPool
	cert tls.Certificate
}

// LoadTLS reads CAFile, CertFile and KeyFile from dir.
func LoadTLS(dir string) (*TLS, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrTLS, filepath.Join(dir, CAFile))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	if info, err := os.Stat(filepath.Join(dir, KeyFile)); err == nil && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v): chmod 600 it", ErrTLS, filepath.Join(dir, KeyFile), info.Mode().Perm())
	}
	return &TLS{ca: pool, cert: cert}, nil
}

// NewTLS builds the configuration from PEM bytes (tests, and callers that
// keep keys elsewhere).
func NewTLS(caPEM, certPEM, keyPEM []byte) (*TLS, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: no PEM CA certificate", ErrTLS)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return &TLS{ca: pool, cert: cert}, nil
}

// Server is the configuration of the listening (destination) end: a peer
// without a certificate the CA signed is refused in the handshake.
func (t *TLS) Server() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		ClientCAs:    t.ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

// Client is the configuration of the connecting (source) end for the
// destination serverName (its certificate must name it).
func (t *TLS) Client(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{t.cert},
		RootCAs:      t.ca,
		ServerName:   serverName,
	}
}
