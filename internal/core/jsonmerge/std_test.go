package jsonmerge

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// An independent reference for MergePatch: RFC 7386 (now RFC 7396) section 2
// written over encoding/json's generic values. The other reference,
// refMergePatch, is the previous implementation and skips values the way
// MergePatch does; this one shares nothing with it but the standard library,
// so a scanner mistake common to both shows up here.

// rfc7386Examples are the test cases of RFC 7386 appendix A (the same in RFC
// 7396): target, patch, result.
var rfc7386Examples = [][3]string{
	{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
	{`{"a":"b"}`, `{"a":null}`, `{}`},
	{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
	{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
	{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
	{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
	{`["a","b"]`, `["c","d"]`, `["c","d"]`},
	{`{"a":"b"}`, `["c"]`, `["c"]`},
	{`{"a":"foo"}`, `null`, `null`},
	{`{"a":"foo"}`, `"bar"`, `"bar"`},
	{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
	{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
	{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
}

// stdDecode decodes one JSON text with encoding/json (numbers as
// json.Number, so that their spelling is compared exactly); ok is false when
// encoding/json rejects it.
func stdDecode(b []byte) (v any, ok bool) {
	if !json.Valid(b) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// stdMergePatch is RFC 7386 section 2, MergePatch(Target, Patch), as the RFC
// writes it.
func stdMergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for name, value := range p {
		if value == nil {
			delete(t, name)
		} else {
			t[name] = stdMergePatch(t[name], value)
		}
	}
	return t
}

// sameAsStdlib checks MergePatch(doc, patch) against stdMergePatch. Inputs
// encoding/json accepts (and an empty doc: no state yet) must merge without
// error into the same JSON value, as encoding/json reads it. Inputs it
// rejects may be rejected or not: MergePatch documents that it checks values
// other than objects only as far as needed to find their end (the envelope
// decoder validated the payload before), so it need not refuse them; it must
// only not panic.
func sameAsStdlib(t *testing.T, doc, patch []byte) {
	t.Helper()
	got, err := MergePatch(doc, patch)
	var target any // none: merges as {}
	if len(doc) > 0 {
		var ok bool
		if target, ok = stdDecode(doc); !ok {
			return
		}
	}
	p, ok := stdDecode(patch)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("merge %q + %q: %v; encoding/json accepts both", doc, patch, err)
	}
	out, ok := stdDecode(got)
	if !ok {
		t.Fatalf("merge %q + %q = %q: not JSON encoding/json accepts", doc, patch, got)
	}
	if want := stdMergePatch(target, p); !reflect.DeepEqual(out, want) {
		wb, _ := json.Marshal(want)
		t.Fatalf("merge %q + %q = %s; RFC 7386 over encoding/json gives %s", doc, patch, got, wb)
	}
}

// TestMergePatchRFC7386Examples: the RFC's own examples give the RFC's
// results, as values, and agree with the encoding/json reference.
func TestMergePatchRFC7386Examples(t *testing.T) {
	for _, c := range rfc7386Examples {
		got, err := MergePatch([]byte(c[0]), []byte(c[1]))
		if err != nil {
			t.Fatalf("merge %s + %s: %v", c[0], c[1], err)
		}
		g, _ := stdDecode(got)
		w, _ := stdDecode([]byte(c[2]))
		if !reflect.DeepEqual(g, w) {
			t.Errorf("merge %s + %s = %s, RFC 7386 gives %s", c[0], c[1], got, c[2])
		}
		sameAsStdlib(t, []byte(c[0]), []byte(c[1]))
	}
}

// TestMergePatchMatchesStdlibCases runs the table of merge_test.go through
// the encoding/json reference too.
func TestMergePatchMatchesStdlibCases(t *testing.T) {
	for _, c := range mergeCases {
		sameAsStdlib(t, []byte(c.doc), []byte(c.patch))
	}
}

// TestStdMergePatchCanFail: the reference is not vacuous: it tells a wrong
// merge (a null kept instead of deleting, a nested object replaced instead of
// merged) from the right one.
func TestStdMergePatchCanFail(t *testing.T) {
	target, _ := stdDecode([]byte(`{"a":{"b":1,"c":2}}`))
	patch, _ := stdDecode([]byte(`{"a":{"b":null,"d":3}}`))
	want := stdMergePatch(target, patch)
	for _, wrong := range []string{`{"a":{"b":null,"c":2,"d":3}}`, `{"a":{"d":3}}`, `{"a":{"c":2,"d":"3"}}`} {
		w, _ := stdDecode([]byte(wrong))
		if reflect.DeepEqual(w, want) {
			t.Errorf("%s taken for the right merge", wrong)
		}
	}
	right, _ := stdDecode([]byte(`{"a":{"c":2,"d":3}}`))
	if !reflect.DeepEqual(right, want) {
		t.Errorf("reference gives %v", want)
	}
}
