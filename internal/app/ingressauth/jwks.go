package ingressauth

// The JWT verification keys: a JWKS from a file (reloaded on change) or a
// URL (fetched at start, every jwksRefresh, and at once for a key id it does
// not hold, at most every unknownKIDEvery).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"golang.org/x/time/rate"
)

const (
	// unknownKIDEvery bounds the fetches a token with an unknown key id
	// causes: a rotated key is picked up at once, and a stream of forged
	// key ids costs the identity provider one request per interval.
	unknownKIDEvery = 30 * time.Second
	// fetchTimeout bounds one fetch of the JWKS URL.
	fetchTimeout = 10 * time.Second
	// maxJWKSBytes bounds a JWKS document.
	maxJWKSBytes = 1 << 20
)

// keySet holds the current keys. Loads replace them whole; gen counts the
// loads, so that tokens verified against older keys can be forgotten.
type keySet struct {
	store  *jwkset.MemoryJWKSet
	gen    atomic.Uint64
	loaded atomic.Bool

	url     string
	client  *http.Client
	limiter *rate.Limiter // unknown key ids
	fetchMu sync.Mutex    // one fetch at a time
	fetches atomic.Int64  // fetches made (tests, logs)
	base    atomic.Pointer[context.Context]
}

func newKeySet(url string, client *http.Client) *keySet {
	if client == nil {
		client = &http.Client{Timeout: fetchTimeout}
	}
	return &keySet{store: jwkset.NewMemoryStorage(), url: url, client: client,
		limiter: rate.NewLimiter(rate.Every(unknownKIDEvery), 1)}
}

// load replaces the keys with the JWKS document data.
func (k *keySet) load(data []byte) (int, error) {
	var m jwkset.JWKSMarshal
	if err := json.Unmarshal(data, &m); err != nil {
		return 0, fmt.Errorf("not a JWKS document: %w", err)
	}
	keys, err := m.JWKSlice()
	if err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, errors.New("the JWKS holds no keys")
	}
	if err := k.store.KeyReplaceAll(context.Background(), keys); err != nil {
		return 0, err
	}
	k.gen.Add(1)
	k.loaded.Store(true)
	return len(keys), nil
}

// fetch loads the JWKS from the URL.
func (k *keySet) fetch(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	k.fetches.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", k.url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", k.url, err)
	}
	if len(data) > maxJWKSBytes {
		return 0, fmt.Errorf("GET %s: the JWKS is over %d bytes", k.url, maxJWKSBytes)
	}
	return k.load(data)
}

// refreshFor fetches the JWKS once more for a key id it does not hold, if
// the limiter allows one now; it reports whether kid is held afterwards.
// Concurrent callers wait for one fetch rather than each making one.
func (k *keySet) refreshFor(kid string) bool {
	if k.url == "" {
		return false
	}
	k.fetchMu.Lock()
	defer k.fetchMu.Unlock()
	if _, err := k.store.KeyRead(context.Background(), kid); err == nil {
		return true // another caller's fetch brought it
	}
	if !k.limiter.Allow() {
		return false
	}
	ctx := context.Background()
	if p := k.base.Load(); p != nil {
		ctx = *p
	}
	if _, err := k.fetch(ctx); err != nil {
		return false
	}
	_, err := k.store.KeyRead(context.Background(), kid)
	return err == nil
}

// refreshingStorage is the keySet as keyfunc's jwkset.Storage: a key id it
// does not hold triggers refreshFor before the token is refused.
type refreshingStorage struct {
	*jwkset.MemoryJWKSet
	ks *keySet
}

func (s refreshingStorage) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	jwk, err := s.MemoryJWKSet.KeyRead(ctx, kid)
	if errors.Is(err, jwkset.ErrKeyNotFound) && s.ks.refreshFor(kid) {
		return s.MemoryJWKSet.KeyRead(ctx, kid)
	}
	return jwk, err
}
