package command

import (
	"errors"
	"strings"
	"testing"
)

// The header name and the reason are wire format: operators' tools and
// dead-letter consumers match them (docs/contract.md).
func TestWireNames(t *testing.T) {
	if Header != "projector-command" {
		t.Errorf("Header = %q", Header)
	}
	if ReasonInvalidValue != "invalid:value" {
		t.Errorf("ReasonInvalidValue = %q", ReasonInvalidValue)
	}
}

type testCommand struct {
	Op string `json:"op"`
}

func (c *testCommand) Valid() bool { return c.Op == "go" }

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string
		ok    bool
	}{
		{"valid", `{"op":"go"}`, true},
		{"unknown op", `{"op":"stop"}`, false},
		{"not JSON", "\x01not json", false},
		{"wrong shape", `["go"]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c testCommand
			err := Decode([]byte(tc.value), &c)
			if tc.ok != (err == nil) {
				t.Fatalf("Decode(%q) = %v, want ok %v", tc.value, err, tc.ok)
			}
			var ce *Error
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("error %T, want *Error", err)
			}
		})
	}
}

// A huge value is quoted cut: the error becomes a dead letter's header.
func TestErrorBounded(t *testing.T) {
	err := Decode([]byte(strings.Repeat("\x01x", 300<<10)), &testCommand{})
	if err == nil {
		t.Fatal("no error")
	}
	if n := len(err.Error()); n > 8*maxQuoted {
		t.Errorf("error is %d bytes", n)
	}
	if !strings.HasPrefix(err.Error(), `bad operator command "`) {
		t.Errorf("error %.40q", err.Error())
	}
}
