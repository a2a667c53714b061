package ingressauth

// The per-tenant rate limit: a token bucket (golang.org/x/time/rate) per
// tenant. A bucket that has been idle long enough to be full again is the
// same as a new one, so it is dropped: the map holds only the tenants seen
// within one refill time, and dropping changes no decision.

import (
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	// maxLimiters bounds the buckets held at once. Tenants come from
	// credentials, so this is only reached when the ingress does not
	// authenticate and clients name tenants freely; a new tenant beyond it
	// waits until idle buckets are dropped.
	maxLimiters = 100_000
	// sweepEvery is how often idle buckets are looked for.
	sweepEvery = time.Minute
)

type limiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration // a bucket idle this long is full again
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	last time.Time // of the last charge
}

func newLimiter(requests int, per time.Duration, burst int, now func() time.Time) *limiter {
	l := rate.Limit(float64(requests) / per.Seconds())
	return &limiter{limit: l, burst: burst, now: now, buckets: map[string]*bucket{},
		idle: time.Duration(float64(burst) / float64(l) * float64(time.Second))}
}

// charge takes one request from tenant's bucket. When it is empty the
// request is not taken, and retryAfter is when one would pass.
func (l *limiter) charge(tenant string) (ok bool, retryAfter time.Duration) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if since := now.Sub(l.lastSweep); since >= sweepEvery || (len(l.buckets) >= maxLimiters && since >= time.Second) {
		l.sweep(now)
	}
	b := l.buckets[tenant]
	if b == nil {
		if len(l.buckets) >= maxLimiters {
			return false, time.Second
		}
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[tenant] = b
	}
	b.last = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // a refused request takes nothing
		return false, d
	}
	return true, 0
}

// sweep drops the buckets idle for a whole refill time.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for t, b := range l.buckets {
		if now.Sub(b.last) >= l.idle {
			delete(l.buckets, t)
		}
	}
}

// RetryAfter formats a wait as Retry-After's whole seconds, rounded up and
// at least 1.
func RetryAfter(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
}
