package config

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${VAR} and ${VAR:-default} in s. As in the shell, the
// default is used when VAR is unset or empty, and is itself expanded (only
// when used). "$${" is a literal "${"; any other "$" is left alone. An unset
// VAR without a default is an error naming it.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			n, v, err := expandRef(s[i:], lookup)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i += n
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// expandRef expands the reference at the start of s ("${...}") and returns
// how many bytes it spans.
func expandRef(s string, lookup func(string) (string, bool)) (int, string, error) {
	i := 2
	for i < len(s) && isEnvNameByte(s[i], i == 2) {
		i++
	}
	name := s[2:i]
	if name == "" {
		return 0, "", fmt.Errorf("malformed reference %q: expected ${NAME} or ${NAME:-default}", clip(s))
	}
	if strings.HasPrefix(s[i:], "}") {
		v, ok := lookupEnv(lookup, name)
		if !ok {
			return 0, "", fmt.Errorf("environment variable %s is not set (write ${%s:-default} to give a default)", name, name)
		}
		return i + 1, v, nil
	}
	if !strings.HasPrefix(s[i:], ":-") {
		return 0, "", fmt.Errorf("malformed reference %q: expected ${NAME} or ${NAME:-default}", clip(s))
	}
	start := i + 2
	// Find the "}" closing this reference: nested "${" open, "}" closes.
	depth := 0
	end := -1
	for j := start; j < len(s) && end < 0; j++ {
		switch {
		case strings.HasPrefix(s[j:], "$${"):
			j += 2
		case strings.HasPrefix(s[j:], "${"):
			depth++
			j++
		case s[j] == '}':
			if depth == 0 {
				end = j
			} else {
				depth--
			}
		}
	}
	if end < 0 {
		return 0, "", fmt.Errorf("malformed reference %q: missing }", clip(s))
	}
	if v, ok := lookupEnv(lookup, name); ok && v != "" {
		return end + 1, v, nil
	}
	v, err := expandEnv(s[start:end], lookup)
	if err != nil {
		return 0, "", err
	}
	return end + 1, v, nil
}

func lookupEnv(lookup func(string) (string, bool), name string) (string, bool) {
	if lookup == nil {
		return "", false
	}
	return lookup(name)
}

func isEnvNameByte(c byte, first bool) bool {
	return c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || !first && '0' <= c && c <= '9'
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
