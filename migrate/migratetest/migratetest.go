// Package migratetest makes what tests of live migration need: a
// migration CA and host certificates (package migrate's TLS directory
// layout).
package migratetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpud/vgpud/migrate"
)

// CA is a test migration CA.
type CA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
	next int64
}

// NewCA makes a CA valid for an hour, failing the test on error.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := MakeCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// MakeCA makes a CA valid for an hour.
func MakeCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vgpud migration test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, der: der, key: key, next: 2}, nil
}

// HostDir writes a TLS directory (ca.pem, cert.pem, key.pem) for a host
// reachable at 127.0.0.1 into a temporary directory of the test and
// returns its path.
func (ca *CA) HostDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := ca.WriteHostDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteHostDir writes a TLS directory for a host reachable at 127.0.0.1
// (and localhost) into dir, which must exist.
func (ca *CA) WriteHostDir(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca.next++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.next), Subject: pkix.Name{CommonName: "vgpud test host"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name, typ string
		b         []byte
		mode      os.FileMode
	}{
		{migrate.CAFile, "CERTIFICATE", ca.der, 0o644},
		{migrate.CertFile, "CERTIFICATE", der, 0o644},
		{migrate.KeyFile, "EC PRIVATE KEY", kb, 0o600},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.b}), f.mode); err != nil {
			return err
		}
	}
	return nil
}

// Load loads a host directory, failing the test on error.
func Load(t testing.TB, dir string) *migrate.TLS {
	t.Helper()
	c, err := migrate.LoadTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
