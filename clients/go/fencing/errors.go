package fencing

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxToken is the largest fencing token an adapter stores: 2^63-1, PostgreSQL's largest bigint.
const MaxToken uint64 = math.MaxInt64

// StaleTokenError is the resource's refusal: a token larger than Token was accepted for
// Resource before (Mark is the largest). The holder lost its lease to a newer one: stop
// writing, and acquire the lease again for a new token.
type StaleTokenError struct {
	// Resource is the resource key (PostgreSQL), the mark key (Redis) or the lease name (the
	// interceptors).
	Resource string
	Token    uint64
	Mark     uint64
	// Err is the store's own error (the driver's, Redis's reply), if the refusal came as one.
	Err error
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("stale fencing token %d for %q: the highest seen is %d", e.Token, e.Resource, e.Mark)
}

// Unwrap is the store's own error, if any.
func (e *StaleTokenError) Unwrap() error { return e.Err }

// InvalidInputError is bad input to a fenced write: a token of 0 or above MaxToken, an empty or
// over-long resource key. Message names the argument. Fix the call; retrying cannot help.
type InvalidInputError struct {
	Message string
	// Err is the store's own error (the driver's, Redis's reply); nil when the input was refused
	// before anything was sent.
	Err error
}

func (e *InvalidInputError) Error() string { return e.Message }

// Unwrap is the store's own error, if any.
func (e *InvalidInputError) Unwrap() error { return e.Err }

// CheckToken returns an *InvalidInputError naming argument if token is not a fencing token an
// adapter can store (1 to MaxToken).
func CheckToken(argument string, token uint64) error {
	if token == 0 || token > MaxToken {
		return &InvalidInputError{Message: fmt.Sprintf("%s must be a fencing token from 1 to %d, not %d", argument, MaxToken, token)}
	}
	return nil
}

// ParseToken reads a token in canonical decimal, as the metadata convention carries it: digits
// only, no sign, no leading zero, 1 to MaxToken. The error's message names argument and quotes
// what was given (escaped, cut to 40 characters).
func ParseToken(argument, text string) (uint64, error) {
	canonical := text != "" && text[0] != '0' && len(text) <= 19 && strings.Trim(text, "0123456789") == ""
	if canonical {
		if token, err := strconv.ParseUint(text, 10, 64); err == nil && token <= MaxToken {
			return token, nil
		}
	}
	return 0, &InvalidInputError{Message: fmt.Sprintf("%s must be a fencing token from 1 to %d, not %s", argument, MaxToken, quotedPrefix(text))}
}

// quotedPrefix is text in double quotes with Go's escapes, cut to its first 40 characters: it
// may be anything a caller sent.
func quotedPrefix(text string) string {
	const shown = 40
	runes := []rune(text)
	if len(runes) <= shown {
		return strconv.Quote(text)
	}
	return strconv.Quote(string(runes[:shown])) + "…"
}

// markInStaleMessage is the mark at the end of an adapter's refusal: PostgreSQL's LF001 and
// Redis's STALETOKEN both end with "the highest seen is N".
func markInStaleMessage(message string) (uint64, bool) {
	const marker = "the highest seen is "
	i := strings.LastIndex(message, marker)
	if i < 0 {
		return 0, false
	}
	digits := message[i+len(marker):]
	if end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); end >= 0 {
		digits = digits[:end] // pgx adds " (SQLSTATE LF001)"
	}
	mark, err := strconv.ParseUint(digits, 10, 64)
	return mark, err == nil
}
