package config

import (
	"strings"
	"testing"
)

// TestTracingConfig: absent is off; an endpoint turns it on, with
// /v1/traces appended when it has no path and serviceName defaulted; a bad
// endpoint is refused naming tracing.otlp.endpoint.
func TestTracingConfig(t *testing.T) {
	c, err := Parse([]byte(ingressBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Enabled() || c.Tracing.TracesURL() != "" || c.Tracing.ServiceName != DefaultServiceName {
		t.Fatalf("tracing absent: enabled %v, url %q, %+v", c.Tracing.Enabled(), c.Tracing.TracesURL(), c.Tracing)
	}
	for _, tc := range []struct{ yaml, url, service string }{
		{"tracing: {otlp: {endpoint: 'http://collector:4318'}}", "http://collector:4318/v1/traces", "projector"},
		{"tracing: {otlp: {endpoint: 'https://collector:4318/'}, serviceName: orders}", "https://collector:4318/v1/traces", "orders"},
		{"tracing: {otlp: {endpoint: 'http://gw/otlp/v1/traces'}}", "http://gw/otlp/v1/traces", "projector"},
	} {
		c, err := Parse([]byte(ingressBase+tc.yaml+"\n"), nil)
		if err != nil {
			t.Errorf("%s: %v", tc.yaml, err)
			continue
		}
		if !c.Tracing.Enabled() || c.Tracing.TracesURL() != tc.url || c.Tracing.ServiceName != tc.service {
			t.Errorf("%s: enabled %v, url %q, service %q; want %q, %q", tc.yaml, c.Tracing.Enabled(), c.Tracing.TracesURL(), c.Tracing.ServiceName, tc.url, tc.service)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"tracing: {otlp: {endpoint: 'collector:4318'}}", `tracing.otlp.endpoint: must be an absolute http or https URL, got "collector:4318"`},
		{"tracing: {otlp: {endpoint: 'grpc://collector:4317'}}", "tracing.otlp.endpoint: must be an absolute http or https URL"},
		{"tracing: {otlp: {endpoint: 'http://'}}", "tracing.otlp.endpoint: missing host"},
		{"tracing: {otlp: {endpoint: 'http://c:4318/?a=b'}}", "tracing.otlp.endpoint: must not have a query or fragment"},
		{"tracing: {otlp: {endpoint: 'http://c:4318'}, serviceName: ' '}", "tracing.serviceName: must not be blank"},
		{"tracing: {otlp: {endpoint: 'http://c:4318', header: x}}", "tracing.otlp.header"},
	} {
		_, err := Parse([]byte(ingressBase+tc.yaml+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.yaml, err, tc.want)
		}
	}
}
