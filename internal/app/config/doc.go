// Package config loads, defaults and validates the projector configuration
// (docs/contract.md#configuration; every key: docs/configuration.md).
//
// Guarantees:
//
//   - A *Config returned by Load or Parse has had ApplyDefaults applied and has
//     passed Validate. Callers never need to re-check ranges, enum values,
//     topic names, templates or URLs. A Config built in Go should go through
//     ApplyDefaults and Validate before use; Validate never changes the Config.
//   - Every error returned by Load, Parse, Validate and Kafka.SetBrokers is an
//     *Error, or an errors.Join of several *Error values (use Errors to list
//     them). Error.Key is the full dotted path of the offending key, for example
//     "kafka.brokers", "projections[1].events.CaseOpened" or
//     "sideEffects[0].webhook.url"; Error.Line is the line in the file when it
//     is known. Unknown keys, keys given twice, wrong YAML types and unset
//     environment variables are all errors; nothing is ignored silently.
//   - ${VAR} and ${VAR:-default} are expanded inside scalar values before they
//     are interpreted, so an expanded value is always exactly one value: it can
//     never inject YAML structure, and a password containing "#" or ": " is
//     taken as is. Comments and mapping keys are not expanded. "$${" gives a
//     literal "${". Because expansion follows parsing, a reference inside a
//     flow collection must be quoted to be valid YAML (input: ["${TOPIC}"]);
//     for integer and boolean keys the quotes around an expanded value do not
//     make it a string.
//   - Zero values mean "use the default" (so `maxAttempts: 0` is the same as
//     leaving it out); negative values are errors.
//
// The side-effect domain owns what its settings mean: a side effect's key
// template and condition are checked with package effect's own parser and
// checks (effect.ParseTemplate, effect.Condition.Check), so that validation
// and expansion can never disagree, and the defaults of a side effect are
// effect's and webhook's constants. This package keeps the YAML form
// (SideEffect, Condition, Webhook); internal/app/wiring converts it to the
// library's types.
package config
