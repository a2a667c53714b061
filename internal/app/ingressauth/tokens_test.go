package ingressauth

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

func hashLine(token, tenant string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:]) + " " + tenant
}

// TestTokensFile: the file's format, lookups, and errors that name the line
// without repeating it (a line may hold a token pasted by mistake).
func TestTokensFile(t *testing.T) {
	file := "# credentials\n\n" + hashLine("tok-a", "acme") + "\n  " + hashLine("tok-b", "globex") + "   # rotated 2026-11\n" +
		strings.ToUpper(hashLine("tok-c", "x"))[:64] + " acme\n"
	ts, err := parseTokens([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"tok-a": "acme", "tok-b": "globex", "tok-c": "acme", "tok-d": "", "": ""} {
		got, ok := ts.lookup(tok)
		if got != want || ok != (want != "") {
			t.Errorf("lookup(%q) = %q %v, want %q", tok, got, ok, want)
		}
	}
	const secret = "s3cr3t-token-pasted-by-mistake"
	for _, tc := range []struct{ file, want string }{
		{secret + " acme\n", "line 1: the first field must be the 64 hex digits"},
		{"# c\n" + secret + "\n", "line 2: want two fields"},
		{hashLine("a", "acme") + " extra\n", "line 1: want two fields"},
		{hashLine("a", "acme") + "\n" + hashLine("a", "globex") + "\n", "line 2: the same token hash as line 1"},
		{strings.Repeat("g", 64) + " acme\n", "line 1: the first field must be the 64 hex digits"},
		{hashLine("a", strings.Repeat("t", 256)) + "\n", "line 1: the tenant must be 1 to 255"},
	} {
		_, err := parseTokens([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.file, err, tc.want)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("the error repeats the line: %v", err)
		}
	}
	empty, err := parseTokens([]byte("# nobody\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := empty.lookup("tok-a"); ok {
		t.Fatal("an empty file lets a token in")
	}
}

// TestBearerSyntax: RFC 6750's "Bearer <token68>", scheme case-insensitive.
func TestBearerSyntax(t *testing.T) {
	for v, want := range map[string]string{
		"Bearer abc.def-ghi_~+/==": "abc.def-ghi_~+/==",
		"bearer abc":               "abc",
		"Bearer  abc":              "abc",
		"Bearer":                   "",
		"Bearer ":                  "",
		"Bearer a b":               "",
		"Basic abc":                "",
		"Bearer ===":               "",
		"Bearer ab=c":              "",
	} {
		got, ok := bearer(v)
		if ok != (want != "") || (ok && got != want) {
			t.Errorf("bearer(%q) = %q %v, want %q", v, got, ok, want)
		}
	}
}

// TestRateLimit: a bucket per tenant, Retry-After from the reservation,
// refused requests take nothing, and idle buckets are dropped without
// changing a decision.
func TestRateLimit(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newLimiter(2, time.Minute, 3, func() time.Time { return now }) // one per 30s, bursts of 3
	for i := range 3 {
		if ok, _ := l.charge("a"); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	ok, wait := l.charge("a")
	if ok || wait != 30*time.Second || RetryAfter(wait) != "30" {
		t.Fatalf("over the burst: ok %v, wait %s (Retry-After %s), want refused for 30s", ok, wait, RetryAfter(wait))
	}
	if ok, _ := l.charge("b"); !ok {
		t.Fatal("another tenant shares a's bucket")
	}
	now = now.Add(29 * time.Second)
	if ok, wait := l.charge("a"); ok || wait < 999*time.Millisecond || wait > time.Second { // x/time/rate computes in float64
		t.Fatalf("29s later: ok %v wait %s, want refused for 1s more (refusals take nothing)", ok, wait)
	}
	now = now.Add(time.Second)
	if ok, _ := l.charge("a"); !ok {
		t.Fatal("30s later: refused, want one request refilled")
	}
	if RetryAfter(1500*time.Millisecond) != "2" || RetryAfter(time.Millisecond) != "1" {
		t.Fatal("Retry-After must round up to whole seconds, at least 1")
	}
	// a and b idle for a whole refill time (90s): dropped at the next
	// sweep; a new bucket is full, as the old one would have been.
	now = now.Add(91 * time.Second)
	if ok, _ := l.charge("c"); !ok {
		t.Fatal("c refused")
	}
	if _, held := l.buckets["a"]; held || len(l.buckets) != 1 {
		t.Fatalf("buckets after a sweep: %d (a held: %v), want only c", len(l.buckets), held)
	}
}
