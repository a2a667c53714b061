//go:build !race

package rebuild

const raceEnabled = false
