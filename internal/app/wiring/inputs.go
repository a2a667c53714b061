package wiring

import (
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/processor"
)

// InputFormats are the configured kafka.input formats and Schema Registry
// as the processor takes them (the live worker's and a rebuild's alike: a
// rebuild reads the inputs as live does).
func InputFormats(cfg *config.Config) (map[string]processor.InputFormat, *processor.SchemaRegistry) {
	var formats map[string]processor.InputFormat
	for _, in := range cfg.Kafka.Input {
		if in.Format == "" && len(in.Fields) == 0 {
			continue
		}
		if formats == nil {
			formats = map[string]processor.InputFormat{}
		}
		formats[in.Topic] = processor.InputFormat{Format: processor.Format(in.Format), Fields: in.Fields}
	}
	s := cfg.SchemaRegistry
	if s == nil {
		return formats, nil
	}
	sr := &processor.SchemaRegistry{URL: s.URL, Username: s.Username, Password: s.Password, BearerToken: s.BearerToken,
		Timeout: s.Timeout.Std(), CacheSize: s.CacheSize}
	if t := s.TLS; t != nil {
		sr.CAFile, sr.CertFile, sr.KeyFile, sr.ServerName, sr.InsecureSkipVerify = t.CAFile, t.CertFile, t.KeyFile, t.ServerName, t.InsecureSkipVerify
	}
	return formats, sr
}
