package sideeffectstest

import (
	"fmt"
	"testing"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// Intent returns the intent of effect name for key, as the processor would
// produce it for projection proj and the executor parse it: an
// intents-topic value (effect.IntentValue) read back with effect.ParseIntent.
func Intent(t testing.TB, key, name, proj string) effect.Intent {
	t.Helper()
	raw := fmt.Sprintf(`{"eventId":"ev-%s","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateVersion":1}`, key)
	ev, err := envelope.Decode([]byte(raw), 0)
	if err != nil {
		t.Fatal(err)
	}
	in, err := effect.ParseIntent(effect.IntentValue(projection.Intent{Effect: name, Key: key}, proj, (*projection.Event)(ev), 1, []byte(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return in
}
