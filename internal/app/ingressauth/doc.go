// Package ingressauth is the door lock of the HTTP ingress
// (docs/ingress.md#authentication, decision 013): who may write events and
// read receipts, for which tenant, over which transport, and how often.
//
// A Gate is built from the ingress section of the configuration (New reads
// every file it names, so `projector run --check` finds a bad one) and
// gives the ingress four things:
//
//   - Wrap: middleware that authenticates every request before the ingress
//     sees it (a bearer token from ingress.auth.tokensFile, a JWT verified
//     against a JWKS, or a verified client certificate) and puts the
//     credential's tenant into the request's context (Tenant). A missing or
//     bad credential is answered 401 with WWW-Authenticate: Bearer (RFC
//     6750) and a problem body; an X-Tenant-ID or ?tenant= naming another
//     tenant is answered 403. Failures are counted by reason
//     (projector_ingress_auth_failures_total), never with the credential.
//   - TLSConfig: the listener's TLS, whose certificate and client CA are
//     reloaded when their files change.
//   - Charge: the per-tenant token bucket of ingress.rateLimit.
//   - Run: the goroutine that reloads the files (on change, polled every
//     ingress.reloadInterval, and on SIGHUP) and refreshes a JWKS URL.
//
// Invariants:
//
//   - The tenant of an authenticated request is the credential's, never the
//     client's say-so: nothing downstream reads X-Tenant-ID when Tenant
//     reports one.
//   - A token is never stored, logged or counted: the tokens file holds
//     SHA-256 digests, a presented token is hashed and compared with every
//     digest in constant time (crypto/subtle), and errors about the file
//     name lines, not their content.
//   - JOSE is the libraries' (golang-jwt for parsing and verifying, jwkset
//     and keyfunc for the keys): only RS256 and ES256 are accepted; exp is
//     required; exp, nbf and iat are checked with the configured leeway;
//     iss and aud must match.
//   - A reload that fails keeps the previous credentials, keys or
//     certificate, logs an error and counts it; a running ingress never
//     loses its door lock to a half-written file.
//   - Every series of a known label value exists from the start at 0
//     (docs/design.md#series-exist-at-zero).
//   - Run owns the reload loop and the SIGHUP subscription; everything else
//     is safe for concurrent use by request goroutines.
package ingressauth
