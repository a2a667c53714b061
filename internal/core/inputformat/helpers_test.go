package inputformat

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/envelope"
)

// record builds a Kafka record; headers are name, value pairs.
func record(key, value string, headers ...string) *kgo.Record {
	r := &kgo.Record{Value: []byte(value)}
	if key != "" {
		r.Key = []byte(key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func mustNew(t testing.TB, o Options) *Decoder {
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// decodeRecord is Decode returning its result.
func decodeRecord(d *Decoder, ctx context.Context, r *kgo.Record) (Result, error) {
	var res Result
	err := d.Decode(ctx, r, nil, &res)
	return res, err
}

// outcome is what the processor would see for one record: Decode, then
// envelope.Decode of the result, as records.go will call them.
type outcome struct {
	ev     *envelope.Event
	res    Result
	reason string // dead-letter reason; "" for a valid event
	msg    string
	err    error // neither valid nor invalid (unavailable)
}

func decodeOne(t testing.TB, d *Decoder, r *kgo.Record) outcome {
	t.Helper()
	res, err := decodeRecord(d, context.Background(), r)
	if err == nil {
		var ev *envelope.Event
		if ev, err = envelope.Decode(res.Value, d.maxBytes); err == nil {
			return outcome{ev: ev, res: res}
		}
	}
	var ee *envelope.Error
	if errors.As(err, &ee) {
		return outcome{reason: ee.Reason(), msg: ee.Error(), res: res}
	}
	return outcome{err: err}
}

// valid is decodeOne of a record that must be a valid event.
func valid(t testing.TB, d *Decoder, r *kgo.Record) outcome {
	t.Helper()
	o := decodeOne(t, d, r)
	if o.ev == nil {
		t.Fatalf("record is not a valid event: reason %q: %s %v", o.reason, o.msg, o.err)
	}
	return o
}

// dedupID is the dedup key the processor will make for the event.
func (o outcome) dedupID() dedup.ID {
	return dedup.MakeID(o.ev.TenantID, o.res.DedupEventID(o.ev.EventID))
}

// checkStory asserts the dedup verdicts a format's records get: each copy
// has the original's dedup key and fingerprint (a duplicate), the changed
// record its key and another fingerprint (a conflict).
func checkStory(t *testing.T, d *Decoder, original *kgo.Record, copies map[string]*kgo.Record, changed *kgo.Record) outcome {
	t.Helper()
	base := valid(t, d, original)
	for name, c := range copies {
		o := valid(t, d, c)
		if o.dedupID() != base.dedupID() {
			t.Errorf("%s: dedup key differs from the original's: %s vs %s", name, o.res.Value, base.res.Value)
		}
		if o.ev.Fingerprint() != base.ev.Fingerprint() {
			t.Errorf("%s: fingerprint differs from the original's (not a duplicate):\n%s\n%s", name, o.res.Value, base.res.Value)
		}
	}
	ch := valid(t, d, changed)
	if ch.dedupID() != base.dedupID() {
		t.Errorf("changed: dedup key differs: it would be a new event, not a conflict")
	}
	if ch.ev.Fingerprint() == base.ev.Fingerprint() {
		t.Errorf("changed: same fingerprint: the change would pass as a duplicate")
	}
	return base
}

// poison is a record that must be dead-lettered with reason, its message
// containing msg.
type poison struct {
	name   string
	rec    *kgo.Record
	reason string
	msg    string
}

func checkPoison(t *testing.T, d *Decoder, cases []poison) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := decodeOne(t, d, c.rec)
			if o.reason != c.reason || !strings.Contains(o.msg, c.msg) {
				t.Errorf("reason %q (%s; err %v), want %q containing %q", o.reason, o.msg, o.err, c.reason, c.msg)
			}
		})
	}
}
