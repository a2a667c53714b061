package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Parse parses a YAML configuration. Environment references in scalar values
// are resolved with lookupEnv (nil means no variable is set). The result has
// defaults applied and has passed Validate; on failure the error is an
// *Error or an errors.Join of them, each with the line when known.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	d := &decoder{
		lookup:   lookupEnv,
		lines:    map[string]int{},
		expanded: map[*yaml.Node]bool{},
		fromEnv:  map[*yaml.Node]bool{},
		budget:   maxNodes,
	}
	var c Config
	d.decode(root, reflect.ValueOf(&c).Elem(), "")
	if len(d.errs) > 0 {
		return nil, d.errs.err()
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		for _, e := range Errors(err) {
			if e.Line == 0 {
				e.Line = d.lineOf(e.Key)
			}
		}
		return nil, err
	}
	return &c, nil
}

// maxNodes bounds the nodes visited, aliases included, so that an alias bomb
// fails instead of exhausting memory.
const maxNodes = 100_000

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument returns the top-level mapping of the single document in data.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Msg: "the file is empty"}
		}
		return nil, yamlError(err, data)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err, data)
		}
		return nil, &Error{Msg: "more than one YAML document; a configuration is a single mapping", Line: extra.Line}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, &Error{Msg: "the file is empty"}
		}
		root = root.Content[0]
	}
	if isNull(root) {
		return nil, &Error{Msg: "the file is empty", Line: root.Line}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Msg: "the top level must be a mapping (name: …, kafka: …), got " + describe(root), Line: root.Line}
	}
	return root, nil
}

func yamlError(err error, data []byte) *Error {
	e := &Error{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "invalid YAML: " + m[2]
	}
	if bytes.Contains(data, []byte("${")) {
		// References are expanded after parsing; "{" and "}" are
		// indicators inside flow collections.
		e.Msg += ` (inside [...] or {...}, quote ${...} references: ["${VAR}"])`
	}
	return e
}

// decoder walks yaml.Nodes into Go values by reflection so that every error
// (unknown key, duplicate key, wrong type, unset variable) carries its full
// path and line, which yaml.v3's own decoder does not give.
type decoder struct {
	lookup   func(string) (string, bool)
	errs     errorList
	lines    map[string]int      // path → line, for Validate's errors
	expanded map[*yaml.Node]bool // nodes already expanded (aliases share nodes)
	fromEnv  map[*yaml.Node]bool // nodes whose value came from an expansion
	budget   int
}

var (
	durationType = reflect.TypeFor[Duration]()
	byteSizeType = reflect.TypeFor[ByteSize]()
	kafkaType    = reflect.TypeFor[Kafka]()
	httpType     = reflect.TypeFor[HTTP]()
	ingressType  = reflect.TypeFor[Ingress]()
)

func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.errs.addLine(path, n.Line, format, args...)
}

// resolve follows aliases and expands environment references in a scalar.
// It reports false when the node is unusable (an error has been recorded).
func (d *decoder) resolve(n *yaml.Node, path string) (*yaml.Node, bool) {
	d.budget--
	if d.budget == 0 {
		d.fail(path, n, "document too large (aliases expand to more than %d nodes)", maxNodes)
	}
	if d.budget <= 0 {
		return nil, false
	}
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode || d.expanded[n] {
		return n, true
	}
	d.expanded[n] = true
	v, err := expandEnv(n.Value, d.lookup)
	if err != nil {
		d.fail(path, n, "%v", err)
		return nil, false
	}
	if v != n.Value {
		n.Value = v
		d.fromEnv[n] = true
		// A plain scalar is typed by its expanded text, so that
		// "maxAttempts: ${N}" is an integer; an empty result stays an
		// explicit empty string rather than becoming null.
		if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 && v != "" {
			n.Tag = ""
		}
	}
	return n, true
}

// typed returns n as it should be typed for an integer or boolean key. A
// reference must be quoted inside a flow collection ([...] or {...}) to be
// valid YAML; for typed keys the quotes around an expanded value do not make
// it a string, so `{enabled: "${TLS}"}` is a boolean.
func (d *decoder) typed(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.ScalarNode && d.fromEnv[n] && n.Value != "" {
		return &yaml.Node{Kind: yaml.ScalarNode, Value: n.Value, Line: n.Line, Column: n.Column}
	}
	return n
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n, ok := d.resolve(n, path)
	if !ok || isNull(n) {
		return // null leaves the zero value: "use the default"
	}
	t := v.Type()
	if t == signingSecretsType {
		if ss, ok := d.decodeSigningSecrets(n, path); ok {
			v.Set(reflect.ValueOf(ss))
		}
		return
	}
	if t == inputTopicType {
		d.decodeInputTopic(n, v, path)
		return
	}
	if t == durationType || t == byteSizeType {
		// The units decode themselves, with the same messages as in any
		// other YAML document.
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.fail(path, n, "%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			hint := ""
			if n.Kind == yaml.ScalarNode {
				hint = fmt.Sprintf(" (write [%s] for a list of one)", n.Value)
			}
			d.fail(path, n, "expected a list, got %s%s", describe(n), hint)
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = e.Line
			d.decode(e, s.Index(i), p)
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(path, n, "expected a mapping, got %s", describe(n))
			return
		}
		m := reflect.MakeMap(t)
		for _, kv := range d.pairs(n, path) {
			p := joinPath(path, kv.k.Value)
			d.lines[p] = kv.k.Line
			e := reflect.New(t.Elem()).Elem()
			d.decode(kv.v, e, p)
			m.SetMapIndex(reflect.ValueOf(kv.k.Value), e)
		}
		v.Set(m)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, n, "expected a string, got %s", describe(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		var x int64
		if d.decodeTyped(n, path, "!!int", "an integer", &x) {
			v.SetInt(x)
		}
	case reflect.Bool:
		var x bool
		if d.decodeTyped(n, path, "!!bool", "true or false", &x) {
			v.SetBool(x)
		}
	case reflect.Interface:
		d.decodeAny(n, v, path)
	default:
		panic("config: no decoder for " + t.String())
	}
}

// decodeTyped decodes an integer or boolean scalar into x, insisting on its
// YAML tag: yaml.v3 would truncate 1.5 into an int. want names the type
// for the message.
func (d *decoder) decodeTyped(n *yaml.Node, path, tag, want string, x any) bool {
	tn := d.typed(n)
	if tn.Kind != yaml.ScalarNode || tn.ShortTag() != tag || tn.Decode(x) != nil {
		d.fail(path, n, "expected %s, got %s", want, describe(tn))
		return false
	}
	return true
}

// decodeAny decodes a free-form value and normalizes it to what
// encoding/json produces when decoding into any (float64 numbers,
// map[string]any objects), so that it compares directly with event payloads.
func (d *decoder) decodeAny(n *yaml.Node, v reflect.Value, path string) {
	if !d.expandTree(n, path) {
		return
	}
	var x any
	if err := n.Decode(&x); err != nil {
		d.fail(path, n, "not representable as JSON (%s): %v", describe(n), strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	b, err := json.Marshal(x)
	if err != nil {
		d.fail(path, n, "not representable as JSON (%s)", describe(n))
		return
	}
	var y any
	if err := json.Unmarshal(b, &y); err != nil {
		d.fail(path, n, "not representable as JSON (%s)", describe(n))
		return
	}
	if y != nil {
		v.Set(reflect.ValueOf(y))
	}
}

func (d *decoder) expandTree(n *yaml.Node, path string) bool {
	n, ok := d.resolve(n, path)
	if !ok {
		return false
	}
	switch n.Kind {
	case yaml.ScalarNode:
		// JSON has no timestamps: keep 2026-01-01 as the text written, not
		// a time.Time re-encoded as "2026-01-01T00:00:00Z".
		if n.ShortTag() == "!!timestamp" {
			n.Tag = "!!str"
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			if !d.expandTree(e, fmt.Sprintf("%s[%d]", path, i)) {
				return false
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !d.expandTree(n.Content[i+1], joinPath(path, n.Content[i].Value)) {
				return false
			}
		}
	}
	return true
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	fields := structFields(v.Type())
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "expected a mapping with keys %s, got %s", strings.Join(fields.names, ", "), describe(n))
		return
	}
	for _, kv := range d.pairs(n, path) {
		key := kv.k.Value
		p := joinPath(path, key)
		d.lines[p] = kv.k.Line
		i, ok := fields.index[key]
		if !ok {
			d.fail(p, kv.k, "unknown key; %s", suggest(v.Type(), key, fields.names))
			continue
		}
		switch {
		case v.Type() == kafkaType && key == "brokers":
			d.decodeBrokers(kv.v, v.Addr().Interface().(*Kafka), p)
		case v.Type() == httpType && key == "listen":
			// An explicit empty string disables the server; null means default.
			if vn, ok := d.resolve(kv.v, p); ok && vn.Kind == yaml.ScalarNode && !isNull(vn) && vn.Value == "" {
				v.Field(i).SetString(HTTPOff)
				continue
			}
			d.decode(kv.v, v.Field(i), p)
		case v.Type() == ingressType && key == "auth":
			d.decodeAuth(kv.v, v.Addr().Interface().(*Ingress), p)
		default:
			d.decode(kv.v, v.Field(i), p)
		}
	}
}

// decodeBrokers accepts a list of host:port, a comma-separated string of
// them, or the string "embedded".
func (d *decoder) decodeBrokers(n *yaml.Node, k *Kafka, path string) {
	n, ok := d.resolve(n, path)
	if !ok || isNull(n) {
		return
	}
	switch n.Kind {
	case yaml.SequenceNode:
		d.decode(n, reflect.ValueOf(&k.Brokers).Elem(), path)
	case yaml.ScalarNode:
		if n.ShortTag() != "!!str" {
			break
		}
		k.Brokers, k.Embedded = splitBrokers(n.Value)
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "expected a list of host:port or the string %q, got %s", EmbeddedBrokers, describe(n))
	}
}

// decodeAuth accepts the mapping of ingress.auth or the string "none".
func (d *decoder) decodeAuth(n *yaml.Node, in *Ingress, path string) {
	n, ok := d.resolve(n, path)
	if !ok || isNull(n) {
		return
	}
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!str" && n.Value == AuthNone {
			in.Auth = &IngressAuth{None: true}
			return
		}
		d.fail(path, n, "expected a mapping with keys %s, or the string %q, got %s",
			strings.Join(structFields(reflect.TypeFor[IngressAuth]()).names, ", "), AuthNone, describe(n))
		return
	}
	d.decode(n, reflect.ValueOf(&in.Auth).Elem(), path)
}

// lineOf returns the line of key, or of its nearest ancestor with a line.
func (d *decoder) lineOf(key string) int {
	for key != "" {
		if l, ok := d.lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
	return 0
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node's type and, for scalars, its value, for messages.
func describe(n *yaml.Node) string {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		v := clip(n.Value)
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int":
			return "integer " + v
		case "!!float":
			return "number " + v
		case "!!bool":
			return "boolean " + v
		case "!!str":
			if n.Value == "" {
				return "an empty string"
			}
			return "string " + strconv.Quote(v)
		default:
			return n.ShortTag() + " " + v
		}
	}
	return "nothing"
}
