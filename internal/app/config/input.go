package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/schemaregistry"
	"gopkg.in/yaml.v3"
)

// InputTopic is one kafka.input entry: a topic and the format of its
// records. In YAML an entry is a plain topic name (the envelope format,
// as before formats existed) or a mapping {topic, format, fields}.
type InputTopic struct {
	Topic string `yaml:"topic"`
	// Format is envelope (the default), cloudevents, debezium-outbox or
	// mapped (docs/configuration.md#input-formats).
	Format string `yaml:"format"`
	// Fields maps an envelope member to a JSON Pointer into the value,
	// "header:<name>" or "key"; it overrides the format's defaults (for
	// mapped it is the whole mapping).
	Fields map[string]string `yaml:"fields"`
}

// InputNames lists the input topics' names, in the configured order.
func (k *Kafka) InputNames() []string {
	names := make([]string, len(k.Input))
	for i, in := range k.Input {
		names[i] = in.Topic
	}
	return names
}

// FormatOptions is the topic's decoder configuration, without the
// registry and the size limit (the wiring adds them).
func (in *InputTopic) FormatOptions() inputformat.Options {
	return inputformat.Options{Format: inputformat.Format(in.Format), Fields: in.Fields}
}

// SchemaRegistry configures the client of a Confluent-compatible Schema
// Registry, for input values (and keys) framed for one.
type SchemaRegistry struct {
	// URL of the registry; a comma-separated list is tried in order.
	URL string `yaml:"url"`
	// Username and Password: HTTP basic authentication (Confluent Cloud's
	// API key and secret); not with BearerToken.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// BearerToken is sent as "Authorization: Bearer <token>".
	BearerToken string `yaml:"bearerToken"`
	// TLS for https URLs; default: the system roots.
	TLS *RegistryTLS `yaml:"tls"`
	// Timeout bounds each request; a slower registry is unavailable and
	// holds its partitions. Default 5s.
	Timeout Duration `yaml:"timeout"`
	// CacheSize is the number of schema ids kept; default 1000.
	CacheSize int `yaml:"cacheSize"`
}

// RegistryTLS configures TLS to the Schema Registry.
type RegistryTLS struct {
	CAFile             string `yaml:"caFile"`
	CertFile           string `yaml:"certFile"`
	KeyFile            string `yaml:"keyFile"`
	ServerName         string `yaml:"serverName"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
}

// ClientOptions is the registry client's configuration.
func (s *SchemaRegistry) ClientOptions() schemaregistry.Options {
	o := schemaregistry.Options{
		URL: s.URL, Username: s.Username, Password: s.Password, BearerToken: s.BearerToken,
		Timeout: s.Timeout.Std(), CacheSize: s.CacheSize,
	}
	if t := s.TLS; t != nil {
		o.TLS = &schemaregistry.TLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	}
	return o
}

var inputTopicType = reflect.TypeFor[InputTopic]()

// decodeInputTopic decodes a kafka.input entry: a plain name, or the
// mapping form.
func (d *decoder) decodeInputTopic(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode {
		v.Set(reflect.ValueOf(InputTopic{Topic: n.Value}))
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "expected a topic name or {topic: …, format: …}, got %s", describe(n))
		return
	}
	d.decodeStruct(n, v, path)
}

// validateInputFormats checks each input's format and fields, and the
// registry. A framed value needs the registry, but any topic but an
// envelope one may carry framed values, so the registry is optional: a
// framed value on a topic without it is an invalid:value dead letter.
func (c *Config) validateInputFormats(l *errorList) {
	for i := range c.Kafka.Input {
		in := &c.Kafka.Input[i]
		key := fmt.Sprintf("kafka.input[%d]", i)
		if in.Format != "" && !slices.Contains(inputformat.Formats, inputformat.Format(in.Format)) {
			l.add(key+".format", "must be one of %v, got %q", inputformat.Formats, in.Format)
			continue
		}
		if _, err := inputformat.New(in.FormatOptions()); err != nil {
			var oe *inputformat.OptionError
			if errors.As(err, &oe) {
				l.add(key+"."+oe.Key, "%s", oe.Msg)
			} else {
				l.add(key, "%v", err)
			}
		}
	}
	if s := c.SchemaRegistry; s != nil {
		if s.URL == "" {
			l.add("schemaRegistry.url", "required")
		} else if _, err := schemaregistry.New(s.ClientOptions()); err != nil {
			l.add("schemaRegistry", "%s", strings.TrimPrefix(err.Error(), "schemaregistry: "))
		}
		if s.CacheSize < 0 {
			l.add("schemaRegistry.cacheSize", "must be positive, got %d", s.CacheSize)
		}
		if s.Timeout < 0 {
			l.add("schemaRegistry.timeout", "must be positive, got %s", s.Timeout)
		}
	}
}
