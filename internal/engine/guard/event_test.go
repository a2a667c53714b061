package guard

import (
	"reflect"
	"testing"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
)

// TestHandlerEventIsEnvelope: projection.Event, the public struct a handler
// is given, declares envelope.Event's fields one for one (name, type, place),
// so that handlerEvent converts the pointer, not the event. The conversion
// does not compile when they differ; this test says which field does, and
// that every field reads the same through the converted pointer.
func TestHandlerEventIsEnvelope(t *testing.T) {
	et, pt := reflect.TypeFor[envelope.Event](), reflect.TypeFor[projection.Event]()
	if et.NumField() != pt.NumField() || et.Size() != pt.Size() {
		t.Fatalf("envelope.Event has %d fields (%d bytes), projection.Event %d (%d bytes)", et.NumField(), et.Size(), pt.NumField(), pt.Size())
	}
	for i := range et.NumField() {
		ef, pf := et.Field(i), pt.Field(i)
		if ef.Name != pf.Name || ef.Type != pf.Type || ef.Offset != pf.Offset {
			t.Errorf("field %d: envelope.Event.%s %v at %d, projection.Event.%s %v at %d", i, ef.Name, ef.Type, ef.Offset, pf.Name, pf.Type, pf.Offset)
		}
	}
	ev, err := envelope.Decode([]byte(`{"eventId":"e1","eventType":"T","aggregateId":"A","aggregateType":"Case",
		"aggregateVersion":7,"tenantId":"t","occurredAt":"2026-06-28T10:00:00Z","correlationId":"c","causationId":"k",
		"producer":"p","payload":{"x":1}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	hv := handlerEvent(ev)
	if reflect.ValueOf(hv).Pointer() != reflect.ValueOf(ev).Pointer() {
		t.Fatal("handlerEvent does not return the same event")
	}
	ev2 := reflect.ValueOf(ev).Elem()
	hv2 := reflect.ValueOf(hv).Elem()
	for i := range ev2.NumField() {
		if !reflect.DeepEqual(ev2.Field(i).Interface(), hv2.Field(i).Interface()) {
			t.Errorf("%s: envelope %v, handler %v", et.Field(i).Name, ev2.Field(i), hv2.Field(i))
		}
	}
}
