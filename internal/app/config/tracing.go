package config

import (
	"net/url"
	"strings"
)

// DefaultServiceName is tracing.serviceName's default: the service.name
// of the spans.
const DefaultServiceName = "projector"

// OTLPTracesPath is the OTLP/HTTP path of traces, appended to an endpoint
// given without a path.
const OTLPTracesPath = "/v1/traces"

// Tracing configures the OpenTelemetry spans (docs/contract.md#trace-context):
// off unless otlp.endpoint is set.
type Tracing struct {
	// ServiceName is the spans' service.name; default DefaultServiceName.
	ServiceName string `yaml:"serviceName"`
	OTLP        OTLP   `yaml:"otlp"`
}

// OTLP is where the spans are exported to, over OTLP/HTTP (protobuf).
type OTLP struct {
	// Endpoint is the collector's http or https URL, e.g.
	// http://collector:4318; without a path, OTLPTracesPath is appended
	// (as OTEL_EXPORTER_OTLP_ENDPOINT is read), with one it is used as it
	// is. Empty: tracing is off. The exporter's other settings (headers,
	// TLS files, compression, timeout) are the SDK's OTEL_EXPORTER_OTLP_*
	// environment variables.
	Endpoint string `yaml:"endpoint"`
}

// Enabled reports whether spans are made and exported.
func (t *Tracing) Enabled() bool { return t.OTLP.Endpoint != "" }

// TracesURL is the URL the spans are posted to: Endpoint, with
// OTLPTracesPath when it has no path. "" when tracing is off or Endpoint
// is not a URL (Validate reports that).
func (t *Tracing) TracesURL() string {
	u, err := url.Parse(t.OTLP.Endpoint)
	if !t.Enabled() || err != nil {
		return ""
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = OTLPTracesPath
	}
	return u.String()
}

func (t *Tracing) applyDefaults() {
	if t.ServiceName == "" {
		t.ServiceName = DefaultServiceName
	}
}

// validateTracing checks the tracing section: an endpoint, when set, is an
// absolute http or https URL without a query or fragment.
func (c *Config) validateTracing(l *errorList) {
	t := &c.Tracing
	if !t.Enabled() {
		return
	}
	checkURL(l, "tracing.otlp.endpoint", t.OTLP.Endpoint)
	if u, err := url.Parse(t.OTLP.Endpoint); err == nil && (u.RawQuery != "" || u.Fragment != "") {
		l.add("tracing.otlp.endpoint", "must not have a query or fragment, got %q", t.OTLP.Endpoint)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		l.add("tracing.serviceName", "must not be blank")
	}
}
