//go:build !race

package processor_test

const raceEnabled = false
