package inputformat

import "github.com/projector-dev/projector/internal/core/envelope"

// openDebezium opens a record as Debezium's Outbox Event Router emits it
// with its defaults: the event id in header "id", the aggregate id as the
// key (JSON-quoted by the JSON converter: "1"), the payload column as the
// value. With table.expand.json.payload=false (the default) a JSON payload
// column arrives as a JSON string holding the JSON; with true, as the JSON
// itself. Both become the same document, so pointers (and the payload) see
// one shape whichever way the connector is configured. A string that does
// not hold a JSON object or array stays a string, as the router keeps a
// payload it cannot expand "as is". An empty value is an event without a
// payload.
func (v *view) openDebezium(res *Result) error {
	if len(v.rec.Value) == 0 {
		return nil
	}
	if err := v.openValue(res, "value"); err != nil {
		return err
	}
	if v.root.kind != kindString {
		return nil
	}
	inner, ok := unescape(nil, v.doc[v.root.start:v.root.end])
	if !ok {
		return nil // left a string; the envelope rejects its unpaired surrogate in the payload
	}
	if i := skipWS(inner, 0); i < len(inner) && (inner[i] == '{' || inner[i] == '[') &&
		checkJSON(inner, envelope.MaxDepth) == "" {
		v.doc, v.root = inner, rootSpan(inner)
	}
	return nil
}
