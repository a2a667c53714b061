//go:build race

package projection

const raceEnabled = true
