package ingressauth

// Bearer tokens from ingress.auth.tokensFile: one credential per line,
// "<sha256 hex of the token> <tenant>", # comments.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// tokenSet is one version of the tokens file. It is never changed once
// built; a reload builds a new one.
type tokenSet struct {
	digests [][sha256.Size]byte
	tenants []string
}

// parseTokens reads a tokens file. Its errors name the line, never its
// content: a line may hold a token pasted by mistake.
func parseTokens(data []byte) (*tokenSet, error) {
	ts := &tokenSet{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) > 2 && f[2][0] == '#' {
			f = f[:2]
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want two fields, the token's SHA-256 in hex and the tenant (then optionally a # comment), got %d", n, len(f))
		}
		var d [sha256.Size]byte
		if len(f[0]) != 2*sha256.Size {
			return nil, fmt.Errorf("line %d: the first field must be the 64 hex digits of the token's SHA-256 (write the hash, never the token)", n)
		}
		if _, err := hex.Decode(d[:], []byte(f[0])); err != nil {
			return nil, fmt.Errorf("line %d: the first field must be the 64 hex digits of the token's SHA-256 (write the hash, never the token)", n)
		}
		if !ValidTenant(f[1]) {
			return nil, fmt.Errorf("line %d: the tenant must be 1 to %d printable ASCII characters", n, maxTenantLen)
		}
		if prev, dup := seen[d]; dup {
			return nil, fmt.Errorf("line %d: the same token hash as line %d", n, prev)
		}
		seen[d] = n
		ts.digests = append(ts.digests, d)
		ts.tenants = append(ts.tenants, f[1])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	return ts, nil
}

// lookup returns the tenant of token, if it is in the set. The token's
// digest is compared with every stored digest in constant time, and the
// loop does not stop at a match: the time taken depends on the number of
// credentials only, not on which (if any) matched or how much of a digest
// did.
func (ts *tokenSet) lookup(token string) (string, bool) {
	d := sha256.Sum256([]byte(token))
	found, idx := 0, 0
	for i := range ts.digests {
		eq := subtle.ConstantTimeCompare(d[:], ts.digests[i][:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 {
		return "", false
	}
	return ts.tenants[idx], true
}

// maxTenantLen bounds a tenant, as the ingress bounds X-Tenant-ID.
const maxTenantLen = 255

// ValidTenant reports whether t is 1 to 255 printable ASCII characters
// (space to tilde): what the ingress accepts in X-Tenant-ID, and what keeps
// a tenant safe in a header, a log line and a receipt key. (A tenant of the
// tokens file has no spaces: they separate its fields.)
func ValidTenant(t string) bool {
	if len(t) == 0 || len(t) > maxTenantLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] < 0x20 || t[i] > 0x7e {
			return false
		}
	}
	return true
}
