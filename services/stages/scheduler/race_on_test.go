//go:build race

package scheduler_test

const raceEnabled = true
