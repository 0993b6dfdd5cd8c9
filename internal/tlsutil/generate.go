package tlsutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Defaults of the generated certificates' lifetimes.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// clockSkew backdates certificates so that a node whose clock is a little
// behind accepts them at once.
const clockSkew = time.Minute

// GenerateCA makes a self-signed CA certificate valid for days days (an
// ECDSA P-256 key), in PEM.
func GenerateCA(days int, now time.Time) (certPEM, keyPEM []byte, err error) {
	if days <= 0 {
		return nil, nil, errors.New("generating CA: the lifetime must be at least one day")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   fmt.Sprintf("Cronoq Agent CA %d", serial),
			Organization: []string{"cronoq"},
		},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.AddDate(0, 0, days),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// CertOptions describe a certificate for GenerateCert.
type CertOptions struct {
	// Server makes a server certificate: server and client authentication,
	// named ServerName, "localhost" and 127.0.0.1 besides IPs and
	// DNSNames. Otherwise a client certificate: client authentication only,
	// named ClientName.
	Server bool
	// IPs and DNSNames are added to the certificate's names.
	IPs      []net.IP
	DNSNames []string
	// Days is the lifetime; it may not outlast the CA. Default:
	// DefaultCertDays, or until the CA expires if that is sooner.
	Days int
	// CACert and CAKey are the signing CA's certificate and private key in
	// PEM (the key as PKCS#8, EC or PKCS#1 RSA).
	CACert, CAKey []byte
}

// GenerateCert makes a certificate (an ECDSA P-256 key) signed by the CA
// of o, in PEM.
func GenerateCert(o CertOptions, now time.Time) (certPEM, keyPEM []byte, err error) {
	ca, caKey, err := ParseCA(o.CACert, o.CAKey)
	if err != nil {
		return nil, nil, err
	}
	if o.Days < 0 {
		return nil, nil, errors.New("generating certificate: the lifetime must be at least one day")
	}
	notAfter := now.AddDate(0, 0, o.Days)
	switch {
	case o.Days == 0:
		notAfter = now.AddDate(0, 0, DefaultCertDays)
		if notAfter.After(ca.NotAfter) {
			notAfter = ca.NotAfter
		}
	case notAfter.After(ca.NotAfter):
		return nil, nil, fmt.Errorf("generating certificate: %d days would outlast the CA, which expires on %s",
			o.Days, ca.NotAfter.UTC().Format(time.DateOnly))
	}
	if now.Before(ca.NotBefore) || now.After(ca.NotAfter) {
		return nil, nil, fmt.Errorf("generating certificate: the CA is not valid now (from %s to %s)",
			ca.NotBefore.UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if o.Server {
		tmpl.Subject.CommonName = ServerName
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{ServerName, "localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	} else {
		tmpl.Subject.CommonName = ClientName
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{ClientName}
	}
	for _, ip := range o.IPs {
		if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	for _, d := range o.DNSNames {
		if d == "" {
			return nil, nil, errors.New("generating certificate: empty DNS name")
		}
		if !slices.Contains(tmpl.DNSNames, d) {
			tmpl.DNSNames = append(tmpl.DNSNames, d)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// ParseCA parses a CA certificate and its private key (PEM) and checks
// that they belong together and that the certificate is a CA's.
func ParseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("reading CA certificate: no PEM certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("reading CA certificate: %w", err)
	}
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, errors.New("reading CA certificate: it is not a CA certificate")
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("reading CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, errors.New("reading CA key: it is not the key of the CA certificate")
	}
	return ca, key, nil
}

// parseKey parses a PEM private key: PKCS#8, EC or PKCS#1 RSA.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM private key")
		}
		var (
			k   any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue // EC PARAMETERS and the like
		}
		if err != nil {
			return nil, err
		}
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("unsupported private key type %T", k)
	}
}

// encodeKey encodes an EC key in PEM ("EC PRIVATE KEY").
func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// newSerial returns a random 128-bit serial number.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
