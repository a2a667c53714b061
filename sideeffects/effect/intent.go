package effect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/projection"
)

// ErrBadIntent is wrapped by ParseIntent for a value that is not an intent.
var ErrBadIntent = errors.New("sideeffects: invalid intent value")

// Intent is one side-effect intent as read from the intents topic.
type Intent struct {
	Key              string          `json:"key"`
	Effect           string          `json:"effect"`
	Projection       string          `json:"projection"`
	AggregateID      string          `json:"aggregateId"`
	AggregateVersion int64           `json:"aggregateVersion"`
	EventID          string          `json:"eventId"`
	Event            json.RawMessage `json:"event"`
	// Value is the whole record value the intent was parsed from; it is what
	// the ledger keeps and what the webhook receives as its body.
	Value []byte `json:"-"`
	// TraceParent and TraceState are the W3C trace context of the event
	// that made the intent: the intent record's traceparent and tracestate
	// headers, validated, kept in the ledger entry and sent as the webhook
	// request's headers (docs/contract.md#trace-context). "" when none.
	// With tracing on, the Runner gives its Caller the call span's context
	// here instead (a child of the event's, in the same trace).
	TraceParent string `json:"-"`
	TraceState  string `json:"-"`
}

// IntentValue builds the intents-topic record value of
// docs/contract.md#side-effect-intents-topic:
//
//	{"key","effect","projection","aggregateId","aggregateVersion","eventId","event":{…}}
//
// rawEvent is the envelope exactly as consumed, embedded unchanged so the
// receiver sees the producer's bytes. version is the version the projection
// applied (the envelope's aggregateVersion for versioned projections).
func IntentValue(in projection.Intent, projectionName string, ev *projection.Event, version int64, rawEvent []byte) []byte {
	raw := bytes.TrimSpace(rawEvent)
	if len(raw) == 0 {
		raw = []byte("null")
	}
	v := make([]byte, 0, 160+len(in.Key)+len(ev.AggregateID)+len(ev.EventID)+len(raw))
	v = append(v, `{"key":`...)
	v = jsonenc.AppendString(v, in.Key)
	v = append(v, `,"effect":`...)
	v = jsonenc.AppendString(v, in.Effect)
	v = append(v, `,"projection":`...)
	v = jsonenc.AppendString(v, projectionName)
	v = append(v, `,"aggregateId":`...)
	v = jsonenc.AppendString(v, ev.AggregateID)
	v = append(v, `,"aggregateVersion":`...)
	v = strconv.AppendInt(v, version, 10)
	v = append(v, `,"eventId":`...)
	v = jsonenc.AppendString(v, ev.EventID)
	v = append(v, `,"event":`...)
	v = append(v, raw...)
	return append(v, '}')
}

// ParseIntent reads an intents-topic record value. Key and effect are
// required; the other members are informational. Errors wrap ErrBadIntent.
func ParseIntent(value []byte) (Intent, error) {
	var in Intent
	if err := json.Unmarshal(value, &in); err != nil {
		return Intent{}, fmt.Errorf("%w: %v", ErrBadIntent, err)
	}
	switch {
	case in.Key == "":
		return Intent{}, fmt.Errorf("%w: key is missing or empty", ErrBadIntent)
	case in.Effect == "":
		return Intent{}, fmt.Errorf("%w: effect is missing or empty", ErrBadIntent)
	}
	in.Value = append([]byte(nil), value...)
	return in, nil
}
