package effect

// For the external tests: the stored entry's format.
var EncodeEntry = encodeEntry

const FormatV1 = formatV1
