package effect

import (
	"errors"
	"fmt"
	"strings"
)

// Key templates: the idempotency key of a Rule's intents, such as
// "email:case:{aggregateId}:sla-breach:v{aggregateVersion}". Parsed here, by
// NewRules and by the configuration's validation alike, so that the two can
// never disagree on what a template is.
//
// The texts of a template's errors start "config: template", as they did
// when the configuration package parsed templates: a template is
// configuration (a file's sideEffects[].key, or a Go program's Rule.Key), and
// the text of a key that could not be built reaches dead-letter records
// (projector-error), which kept their text when templates moved here.

// ErrNoValue is wrapped by Template.Expand when lookup has no value for a
// placeholder.
var ErrNoValue = errors.New("no value for placeholder")

// templateNames are the placeholders besides {payload.<dotted.path>}, e.g.
// {payload.customer.id}.
var templateNames = []string{
	"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion",
	"tenantId", "projection", "effect",
}

// payloadPrefix starts a payload placeholder: {payload.a.b}.
const payloadPrefix = "payload."

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

// TemplateError is a template ParseTemplate refuses. Reason says what is
// wrong without the template (the configuration reports it under the key
// that holds the template).
type TemplateError struct {
	Template string // the template as given
	Reason   string // e.g. "unbalanced '{' at offset 3"
}

// Error returns `config: template "<template>": <reason>`.
func (e *TemplateError) Error() string {
	return fmt.Sprintf("config: template %q: %s", e.Template, e.Reason)
}

// ParseTemplate parses s. Allowed placeholders: {eventId} {eventType}
// {aggregateId} {aggregateType} {aggregateVersion} {tenantId} {projection}
// {effect} and {payload.<dotted.path>} (non-empty segments, no braces). The
// error is a *TemplateError.
func ParseTemplate(s string) (Template, error) {
	var parts []templatePart
	for i := 0; i < len(s); {
		switch s[i] {
		case '}':
			return Template{}, &TemplateError{Template: s, Reason: fmt.Sprintf("unbalanced '}' at offset %d", i)}
		case '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return Template{}, &TemplateError{Template: s, Reason: fmt.Sprintf("unbalanced '{' at offset %d", i)}
			}
			name := s[i+1 : i+1+end]
			if reason := checkPlaceholder(name); reason != "" {
				return Template{}, &TemplateError{Template: s, Reason: reason}
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
	return Template{src: s, parts: parts}, nil
}

// checkPlaceholder says what is wrong with a placeholder's name ("" when
// nothing is).
func checkPlaceholder(name string) string {
	if name == "" {
		return "empty placeholder {}"
	}
	for _, n := range templateNames {
		if name == n {
			return ""
		}
	}
	if path, ok := strings.CutPrefix(name, payloadPrefix); ok {
		for _, seg := range strings.Split(path, ".") {
			if seg == "" {
				return fmt.Sprintf("placeholder {%s} has an empty path segment", name)
			}
		}
		return ""
	}
	return fmt.Sprintf("unknown placeholder {%s}; allowed: {%s} and {payload.<path>}",
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
