package ingressauth

// Client certificates as credentials, and the listener's TLS.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/projector-dev/projector/internal/app/config"
)

// certTenant is the tenant a verified client certificate names: the rest
// of the one URI SAN that starts with the prefix (san-uri), or the
// subject's common name (cn).
func certTenant(m *config.IngressMTLS, leaf *x509.Certificate) (string, *refusal) {
	var tenant string
	switch m.TenantFrom {
	case config.TenantFromCN:
		tenant = leaf.Subject.CommonName
	case config.TenantFromSANURI:
		n := 0
		for _, u := range leaf.URIs {
			if rest, ok := strings.CutPrefix(u.String(), m.URIPrefix); ok {
				tenant, n = rest, n+1
			}
		}
		if n > 1 {
			return "", refuse(reasonClientCert, "the client certificate has more than one URI SAN under "+m.URIPrefix)
		}
	}
	if !ValidTenant(tenant) {
		return "", refuse(reasonClientCert, "the client certificate names no tenant ("+describeSource(m)+", 1 to 255 printable ASCII characters)")
	}
	return tenant, nil
}

func describeSource(m *config.IngressMTLS) string {
	if m.TenantFrom == config.TenantFromCN {
		return "its subject's common name"
	}
	return "a URI SAN " + m.URIPrefix + "{tenant}"
}

// tlsFiles holds the listener's certificate and client CA pool, replaced
// whole by a reload.
type tlsFiles struct {
	clientCA bool
	cur      atomic.Pointer[tlsState]
}

type tlsState struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil without a client CA
}

// load parses [cert, key] or [cert, key, client CA] PEM.
func (t *tlsFiles) load(data [][]byte) (string, error) {
	cert, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return "", &config.Error{Key: "ingress.tls.certFile", Msg: "the certificate and key do not load as a pair: " + err.Error(), Err: err}
	}
	st := &tlsState{cert: &cert}
	if t.clientCA {
		st.pool = x509.NewCertPool()
		if !st.pool.AppendCertsFromPEM(data[2]) {
			return "", &config.Error{Key: "ingress.tls.clientCAFile", Msg: "no PEM certificate in the file"}
		}
	}
	t.cur.Store(st)
	return fmt.Sprintf("certificate for %s, expires %s", cert.Leaf.Subject.CommonName, cert.Leaf.NotAfter.Format("2006-01-02")), nil
}

// TLSConfig is the listener's TLS configuration, nil without ingress.tls.
// Every handshake takes the certificate and client CA loaded last, so a
// renewed certificate is served without a restart. A client certificate
// is verified when presented and never required by the handshake: a
// client without one gets an HTTP 401 that says what is missing.
func (g *Gate) TLSConfig() *tls.Config {
	if g == nil || g.tls == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := g.tls.cur.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*st.cert},
				NextProtos: []string{"h2", "http/1.1"}}
			if st.pool != nil {
				c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, st.pool
			}
			return c, nil
		},
	}
}
