//go:build race

package e2e

// raceEnabled says the tests run under the race detector, so the example
// binary they start is built with it too.
const raceEnabled = true
