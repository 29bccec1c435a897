package lease

import "time"

// SetGiveUpGrace changes the give-up grace for a test and returns what restores it. Zero makes
// the client cancel a given-up Acquire at once and ignore what arrives, as a naive client would.
func SetGiveUpGrace(grace time.Duration) (restore func()) {
	old := giveUpGrace
	giveUpGrace = grace
	return func() { giveUpGrace = old }
}
