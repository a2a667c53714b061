package config

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoValue is wrapped by Template.Expand when lookup has no value for a
// placeholder.
var ErrNoValue = errors.New("no value for placeholder")

// Template placeholders. A template may also use {payload.<dotted.path>},
// e.g. {payload.customer.id}.
var templateNames = []string{
	"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion",
	"tenantId", "projection", "effect",
}

// PayloadPrefix starts a payload placeholder: {payload.a.b}.
const PayloadPrefix = "payload."

// Template is a parsed key template such as
// "email:case:{aggregateId}:sla-breach:v{aggregateVersion}". Text outside
// braces is literal; there is no escape for a literal brace, so any "{" or
// "}" not part of a placeholder is an error. The zero Template expands to "".
type Template struct {
	src   string
	parts []templatePart
}

type templatePart struct {
	lit  string // literal text, when name == ""
	name string // placeholder name without braces
}

// ParseTemplate parses s. Allowed placeholders: {eventId} {eventType}
// {aggregateId} {aggregateType} {aggregateVersion} {tenantId} {projection}
// {effect} and {payload.<dotted.path>} (non-empty segments, no braces).
func ParseTemplate(s string) (Template, error) {
	parts, err := parseTemplate(s)
	if err != nil {
		return Template{}, fmt.Errorf("config: template %q: %w", s, err)
	}
	return Template{src: s, parts: parts}, nil
}

func parseTemplate(s string) ([]templatePart, error) {
	var parts []templatePart
	for i := 0; i < len(s); {
		switch s[i] {
		case '}':
			return nil, fmt.Errorf("unbalanced '}' at offset %d", i)
		case '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return nil, fmt.Errorf("unbalanced '{' at offset %d", i)
			}
			name := s[i+1 : i+1+end]
			if err := checkPlaceholder(name); err != nil {
				return nil, err
			}
			parts = append(parts, templatePart{name: name})
			i += end + 2
		default:
			end := strings.IndexAny(s[i:], "{}")
			if end < 0 {
				end = len(s) - i
			}
			parts = append(parts, templatePart{lit: s[i : i+end]})
			i += end
		}
	}
	return parts, nil
}

func checkPlaceholder(name string) error {
	if name == "" {
		return fmt.Errorf("empty placeholder {}")
	}
	for _, n := range templateNames {
		if name == n {
			return nil
		}
	}
	if path, ok := strings.CutPrefix(name, PayloadPrefix); ok {
		for _, seg := range strings.Split(path, ".") {
			if seg == "" {
				return fmt.Errorf("placeholder {%s} has an empty path segment", name)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown placeholder {%s}; allowed: {%s} and {payload.<path>}",
		name, strings.Join(templateNames, "} {"))
}

// String returns the template source.
func (t Template) String() string { return t.src }

// Placeholders returns the placeholder names in order of appearance,
// without braces (e.g. "aggregateId", "payload.reasonCode").
func (t Template) Placeholders() []string {
	var names []string
	for _, p := range t.parts {
		if p.name != "" {
			names = append(names, p.name)
		}
	}
	return names
}

// Expand substitutes each placeholder with lookup(name), where name is the
// placeholder without braces ("aggregateId", "payload.customer.id"). It fails
// when lookup reports a name as missing; what counts as missing (an absent
// tenantId, a payload path that is not there) is the caller's decision.
func (t Template) Expand(lookup func(name string) (string, bool)) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.name == "" {
			b.WriteString(p.lit)
			continue
		}
		v, ok := lookup(p.name)
		if !ok {
			return "", fmt.Errorf("config: template %q: {%s}: %w", t.src, p.name, ErrNoValue)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}
