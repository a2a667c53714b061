package ingress

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// codes are the status codes the ingress answers; their series exist from
// the start at 0 (as every known label value in internal/app/metrics).
var codes = []int{200, 201, 202, 400, 401, 403, 404, 405, 409, 413, 422, 429, 503}

type metrics struct {
	requests *prometheus.CounterVec
	seconds  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_ingress_requests_total",
			Help: "Ingress HTTP requests answered, by status code.",
		}, []string{"code"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "projector_ingress_seconds",
			Help:    "Time to answer an ingress request (for 201: until the receipt was committed and read).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
	}
	for _, c := range codes {
		m.requests.WithLabelValues(strconv.Itoa(c))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.seconds} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// wrap counts and times every request h answers.
func (m *metrics) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		m.requests.WithLabelValues(strconv.Itoa(sw.code)).Inc()
		m.seconds.Observe(time.Since(start).Seconds())
	})
}
