package projection

import "github.com/projector-dev/projector/internal/core/jsonmerge"

// MergePatch applies an RFC 7386 JSON merge patch to a JSON object document
// and returns the result with object members in sorted order (so equal
// states are equal bytes). Values that are not objects (numbers, strings,
// arrays) are copied as raw bytes: numbers keep their exact spelling and
// precision, and arrays, which a merge patch replaces whole, are never
// decoded. Both inputs must be valid JSON (an event's payload is: the
// processor validated it).
func MergePatch(doc, patch []byte) ([]byte, error) { return jsonmerge.MergePatch(doc, patch) }
