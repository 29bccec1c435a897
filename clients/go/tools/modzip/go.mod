// modzip writes the module zip that a Go module proxy would serve (test.sh uses it). A module of
// its own, so it is not part of the client's module zip; it needs nothing but the standard library.
module leased.test/modzip

go 1.19
