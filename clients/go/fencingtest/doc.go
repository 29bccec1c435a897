// Package fencingtest proves package fencing against a real leased, a real PostgreSQL and a
// real Redis: Kleppmann's scenario with a holder process paused past its lease for each
// adapter (with fencing, and without to show the overwrite it prevents), concurrent writers
// with random pauses, and bad input. Its tests are everything it holds; run them with
// clients/go/test.sh.
package fencingtest
