package effect

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// The ledger's size bounds. An entry is written again at every transition,
// and its changelog record must stay within kafka.maxRecordBytes for as
// long as the key lives: what the entry gains after its intent was checked
// is bounded here, and MaxRecordBytes is the largest record an intent can
// ever lead to (docs/design.md#nothing-dropped-silently). Texts that come
// from outside – a transport error, a receiver's answer or id, an
// operator's note – are cut to their bound where they enter the ledger
// (BoundText, applied to every entry written).
const (
	// MaxErrorBytes bounds an attempt's error text (a transport error, a
	// receiver's status line, the runner's "giving up" suffix).
	MaxErrorBytes = 512
	// MaxRefBytes bounds the external reference of a success, which the
	// receiver supplies (its response id).
	MaxRefBytes = 256
	// MaxNoteBytes bounds an operator's resolve note.
	MaxNoteBytes = 1024
	// MaxTraceParentBytes bounds the traceparent an entry keeps: version
	// 00's is 55 bytes; a future version's longer one is kept up to this,
	// and a longer one dropped (with its tracestate) rather than cut.
	MaxTraceParentBytes = 128
	// MaxTraceStateBytes bounds the tracestate an entry keeps: the 512
	// characters W3C Trace Context asks to be propagated; a longer one is
	// dropped.
	MaxTraceStateBytes = 512
)

// TruncatedMark replaces the middle of a text cut to its bound.
const TruncatedMark = "…[truncated]…"

// BoundText is s as the ledger keeps a text of at most limit bytes. Control
// characters other than tab, newline and carriage return, and bytes that
// are not UTF-8, become U+FFFD: JSON would write each as a six-byte escape,
// and none means anything in an error text, a reference or a note. A
// longer text keeps its beginning and its end (where a wrapped error says
// its cause) around TruncatedMark, cut at character boundaries. Every byte
// of the result encodes to at most two bytes of JSON.
func BoundText(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
			return utf8.RuneError
		}
		return r // strings.Map turns invalid bytes into RuneError itself
	}, s)
	if len(s) <= limit {
		return s
	}
	if limit < len(TruncatedMark) { // no room for the mark: a plain cut
		return s[:runeStart(s, max(limit, 0))]
	}
	keep := limit - len(TruncatedMark)
	head, tail := runeStart(s, keep/2), len(s)-(keep-keep/2)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + TruncatedMark + s[tail:]
}

// runeStart is i, or the start of the character s[i] is inside of.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// bound applies the ledger's bounds to e before it is encoded: the history
// (Start keeps it to MaxHistory too), and every text from outside. It is
// idempotent, so an entry read back and written again is unchanged.
func bound(e *Entry) {
	if len(e.History) > MaxHistory {
		e.History = append(e.History[:0:0], e.History[len(e.History)-MaxHistory:]...)
	}
	for i := range e.History {
		e.History[i] = e.History[i].Bounded()
	}
	e.Ref = BoundText(e.Ref, MaxRefBytes)
	// W3C trace context is printable ASCII (the executor keeps only a
	// validated one); anything else is dropped, never cut or escaped, so
	// its encoding stays within worstEntry's.
	if len(e.TraceParent) > MaxTraceParentBytes || !printable(e.TraceParent) {
		e.TraceParent, e.TraceState = "", ""
	}
	if len(e.TraceState) > MaxTraceStateBytes || !printable(e.TraceState) {
		e.TraceState = ""
	}
	if r := e.Resolution; r != nil {
		r.Note = BoundText(r.Note, MaxNoteBytes)
	}
}

// Bounded is a with its error text and reference cut to their bounds
// (BoundText): what the ledger keeps of it, and what a record that carries
// an attempt elsewhere (the executor's outcome report) should carry.
func (a Attempt) Bounded() Attempt {
	a.Error = BoundText(a.Error, MaxErrorBytes)
	a.Ref = BoundText(a.Ref, MaxRefBytes)
	return a
}

// MaxRecordBytes is the largest changelog record (key and value, without
// the record's framing) that the ledger entry of an intent can become over
// its life: the entry with key, effect and an intent value of intentLen
// bytes (valid JSON, as an intents-topic value is), carrying MaxHistory
// attempts and a resolution with every field at its bound. The processor
// refuses, as too-large, an intent for which it exceeds
// kafka.maxRecordBytes, and so does the executor for an intent that did
// not come through the processor's check.
//
// The changelog record's key is KeyPrefix and the idempotency key: the
// loop produces a state key without its task prefix (internal/core/eos,
// stageChangelog).
func MaxRecordBytes(key, effect string, intentLen int) int {
	// A JSON encoding is the sum of its parts: the worst entry with empty
	// key and effect and a one-byte intent, plus what the real ones add.
	// The intent is stored compacted (json.RawMessage), never longer than
	// it came.
	return 1 + len(key) + worstBase() + quotedLen(key) - 2 + quotedLen(effect) - 2 + intentLen - 1
}

// worstBase is the encoded size of worstEntry("", "", "0").
var worstBase = sync.OnceValue(func() int {
	e := worstEntry("", "", json.RawMessage("0"))
	b, err := encodeEntry(&e) // bounded, as every entry written is
	if err != nil {
		panic("effect: the worst-case entry does not encode: " + err.Error())
	}
	return len(b)
})

// quotedLen is the length of s encoded as a JSON string, as encodeEntry
// encodes it. Printable ASCII other than the quote and the backslash is
// written as it is (the common key, counted without encoding it: the
// processor asks for every intent).
func quotedLen(s string) int {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		return len(s) + 2
	}
	b, _ := jsonenc.Marshal(s) // a string always encodes
	return len(b)
}

// worstEntry is the largest entry an intent can become: every field at its
// longest encoding. TestWorstEntrySetsEveryField fails if Entry, Attempt or
// Resolution gains a field that this leaves unset, so that MaxRecordBytes
// cannot fall behind the format.
func worstEntry(key, effect string, intent json.RawMessage) Entry {
	at := worstTime()
	e := Entry{
		Key: key, Effect: effect, Status: longestStatus(), Attempts: math.MinInt,
		Ref: worstText(MaxRefBytes), NextAttempt: at, Created: at, Updated: at, Intent: intent,
		Resolution:  &Resolution{Outcome: longestStatus(), Note: worstText(MaxNoteBytes), At: at},
		TraceParent: worstText(MaxTraceParentBytes), TraceState: worstText(MaxTraceStateBytes),
	}
	a := worstAttempt()
	for range MaxHistory {
		e.History = append(e.History, a)
	}
	return e
}

// worstAttempt is an attempt with every field at its longest encoding.
func worstAttempt() Attempt {
	return Attempt{
		N: math.MinInt, Start: worstTime(), Duration: math.MinInt64, Outcome: longestOutcome(),
		StatusCode: math.MinInt, Error: worstText(MaxErrorBytes), Ref: worstText(MaxRefBytes),
		Deadline: worstTime(),
	}
}

// worstTime has the longest RFC 3339 form a time.Time marshals to: a
// four-digit year, nine digits of fraction and a zone offset.
func worstTime() time.Time {
	return time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))
}

// worstText is the text of at most limit bytes, as BoundText leaves it,
// whose JSON encoding is the longest: measured over texts of every
// character JSON escapes, rather than assumed.
func worstText(limit int) string {
	var worst string
	for _, c := range []string{"\x01", "\"", "\\", "\n", "\u2028", "\xff", "<", "a", "é"} {
		for _, s := range []string{strings.Repeat(c, limit/len(c)), strings.Repeat(c, 2*limit)} {
			if b := BoundText(s, limit); quotedLen(b) > quotedLen(worst) {
				worst = b
			}
		}
	}
	return worst
}

// longestStatus is the valid status with the longest name (MarshalText
// refuses the others).
func longestStatus() Status {
	var s Status
	for i := range statusNames {
		if len(statusNames[i]) > len(statusNames[s]) {
			s = Status(i)
		}
	}
	return s
}

// longestOutcome is the valid outcome with the longest name (MarshalText
// refuses the others).
func longestOutcome() Outcome {
	var o Outcome
	for i := range outcomeNames {
		if len(outcomeNames[i]) > len(outcomeNames[o]) {
			o = Outcome(i)
		}
	}
	return o
}

// printable reports whether s is all printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
