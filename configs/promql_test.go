package configs_test

import (
	"fmt"
	"sort"
	"strings"
)

// selector is one vector selector of a PromQL expression: a metric name and
// the label values it requires with "=" (other operators, and values holding
// a Grafana variable, are not checked).
type selector struct {
	name string
	eq   map[string]string
}

func (s selector) String() string {
	if len(s.eq) == 0 {
		return s.name
	}
	var parts []string
	for k, v := range s.eq {
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(parts)
	return s.name + "{" + strings.Join(parts, ",") + "}"
}

// notMetrics are PromQL words that look like metric names: aggregators,
// binary operators and modifiers. Functions are recognised by the "(" that
// follows them.
var notMetrics = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// labelLists are the modifiers followed by a parenthesised list of label
// names, which are not metrics.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// selectors extracts the vector selectors of a PromQL expression. It is a
// scanner, not a parser: it knows strings, label matchers {…}, ranges […],
// label lists after by/without/on/ignoring/group_*, function calls and
// Grafana variables ($x, ${x}), which is all the dashboard and the alert
// rules use. An expression it cannot scan is an error, so a new construct
// fails the test loudly instead of being skipped.
func selectors(expr string) ([]selector, error) {
	var out []selector
	i := 0
	skipSpace := func() {
		for i < len(expr) && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	// closing returns the index just past the bracket closing the one at
	// expr[start], skipping strings.
	closing := func(start int, open, close byte) (int, error) {
		depth := 0
		for j := start; j < len(expr); j++ {
			switch c := expr[j]; {
			case c == '"' || c == '\'' || c == '`':
				k := strings.IndexByte(expr[j+1:], c)
				for k >= 0 && c != '`' && expr[j+k] == '\\' {
					n := strings.IndexByte(expr[j+k+2:], c)
					if n < 0 {
						k = -1
						break
					}
					k += n + 1
				}
				if k < 0 {
					return 0, fmt.Errorf("unterminated string at %d in %q", j, expr)
				}
				j += k + 1
			case c == open:
				depth++
			case c == close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d in %q", open, start, expr)
	}
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			// A string argument (label_replace, …): find its end like a
			// bracket pair of the same character.
			k := strings.IndexByte(expr[i+1:], c)
			if k < 0 {
				return nil, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			i += k + 2
		case c == '[':
			end, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			// A selector without a name: {__name__="…"}.
			end, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			eq, err := matchers(expr[i+1 : end-1])
			if err != nil {
				return nil, err
			}
			if n, ok := eq["__name__"]; ok {
				delete(eq, "__name__")
				out = append(out, selector{n, eq})
			} else {
				return nil, fmt.Errorf("selector without a metric name in %q", expr)
			}
			i = end
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unterminated ${ in %q", expr)
				}
				i += end + 1
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case '0' <= c && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
			word := expr[start:i]
			skipSpace()
			next := byte(0)
			if i < len(expr) {
				next = expr[i]
			}
			switch {
			case labelLists[word] && next == '(':
				end, err := closing(i, '(', ')')
				if err != nil {
					return nil, err
				}
				i = end
			case notMetrics[word], next == '(':
				// aggregator, operator or function call
			default:
				s := selector{name: word, eq: map[string]string{}}
				if next == '{' {
					end, err := closing(i, '{', '}')
					if err != nil {
						return nil, err
					}
					if s.eq, err = matchers(expr[i+1 : end-1]); err != nil {
						return nil, err
					}
					i = end
				}
				out = append(out, s)
			}
		default:
			i++
		}
	}
	return out, nil
}

// matchers parses `a="x", b=~"y"` and keeps the equality matchers whose
// value holds no Grafana variable.
func matchers(s string) (map[string]string, error) {
	eq := map[string]string{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		j := 0
		for j < len(rest) && isIdent(rest[j]) {
			j++
		}
		name := rest[:j]
		rest = strings.TrimSpace(rest[j:])
		op := ""
		for _, o := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(rest, o) {
				op = o
				break
			}
		}
		if name == "" || op == "" {
			return nil, fmt.Errorf("cannot read label matcher in {%s}", s)
		}
		rest = strings.TrimSpace(rest[len(op):])
		if rest == "" || (rest[0] != '"' && rest[0] != '\'') {
			return nil, fmt.Errorf("label matcher %s%s without a quoted value in {%s}", name, op, s)
		}
		q := rest[0]
		k := 1
		for k < len(rest) && rest[k] != q {
			if rest[k] == '\\' {
				k++
			}
			k++
		}
		if k >= len(rest) {
			return nil, fmt.Errorf("unterminated value in {%s}", s)
		}
		value := rest[1:k]
		if op == "=" && !strings.Contains(value, "$") {
			eq[name] = value
		}
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest[k+1:]), ","))
	}
	return eq, nil
}
