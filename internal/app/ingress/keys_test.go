package ingress

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/receipt"
)

// TestKeysEveryAcceptedKeyPolls (issue 23, defect 3): the Location of a
// request, /v1/receipts/{key}, must reach this server's receipt handler with
// the key itself. Keys whose path the router rewrites (".", "..": dot
// segments, redirected; "/": routed as a trailing slash) are refused with
// 400 naming the rule; every other key is accepted, and its Location
// answers it. Checked for the keys named in the issue and for every key of
// up to three characters over an alphabet of the characters a path treats
// specially, through the server's own handler over HTTP.
func TestKeysEveryAcceptedKeyPolls(t *testing.T) {
	s, err := New(Config{Listen: "127.0.0.1:0", Topic: "events", ReceiptsTopic: "r", ClaimsTopic: "c", Brokers: []string{"127.0.0.1:1"}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.producer.Close()
	s.view.setCaughtUp() // answers from an empty view: no broker is needed
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// accepted posts a body that is not an envelope under key: the key's
	// check comes first, so 400 naming Idempotency-Key is a refused key
	// and 422 an accepted one (nothing is written either way).
	accepted := func(key string) (bool, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/events", strings.NewReader(`{}`))
		req.Header.Set(HeaderKey, key)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var p problem
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &p)
		switch {
		case resp.StatusCode == 422:
			return true, ""
		case resp.StatusCode == 400 && p.Field == HeaderKey:
			return false, p.Detail
		}
		t.Fatalf("key %q: %d %s, want 400 naming %s or 422", key, resp.StatusCode, b, HeaderKey)
		return false, ""
	}
	// polls gives key a committed receipt, then follows its Location.
	polls := func(key string) bool {
		rc := &receipt.Receipt{Origin: receipt.Origin{Key: key, Count: 1}, Outcome: "applied"}
		s.view.add([]keyed{{key: receipt.Key("", key, 0), value: rc.Encode()}})
		resp, err := noRedirect.Get(srv.URL + receiptPath(key, ""))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b struct{ IdempotencyKey string }
		err = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode == 200 && err == nil && b.IdempotencyKey == key
	}

	for _, key := range []string{".", "..", "/"} {
		ok, why := accepted(key)
		if ok || !strings.Contains(why, "path") {
			t.Errorf("key %q: accepted %v (%q), want 400 naming the rule", key, ok, why)
		}
	}
	for _, key := range []string{"a/b", "%2F", "//", "a//b", "/a", "a/", "./a", "a/..", "a/./b", "%2e%2e", "...", ".a", "a b"} {
		if ok, why := accepted(key); !ok || !polls(key) {
			t.Errorf("key %q: accepted %v (%s), polls %v; want an accepted key whose Location answers it", key, ok, why, polls(key))
		}
	}
	// Every key of up to three characters: accepted exactly when its
	// Location reaches it.
	const alphabet = "./%a2Fe?#; "
	keys := []string{""}
	var all []string
	for range 3 {
		var next []string
		for _, k := range keys {
			for _, c := range alphabet {
				next = append(next, k+string(c))
			}
		}
		all, keys = append(all, next...), next
	}
	refused := 0
	for _, key := range all {
		if strings.TrimSpace(key) != key {
			continue // a header value loses its surrounding spaces
		}
		ok, _ := accepted(key)
		if p := polls(key); ok != p {
			t.Errorf("key %q: accepted %v but its Location reaches it: %v", key, ok, p)
		}
		if !ok {
			refused++
		}
	}
	t.Logf("%d keys checked, %d refused", len(all), refused)
}
