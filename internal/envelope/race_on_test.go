//go:build race

package envelope

// raceEnabled: sync.Pool drops items at random under the race detector, so
// allocation counts are not meaningful.
const raceEnabled = true
