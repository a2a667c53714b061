// Package changelog names the changelog topics of the exactly-once loop's
// users (internal/runtime/eos Config.ChangelogOf): one per input topic, per consumer
// group. The processor and the executor name theirs here, and the operator
// tools find them by the same name.
package changelog

// Topic names the changelog of input under group: "group.input.changelog".
func Topic(group, input string) string { return group + "." + input + ".changelog" }
