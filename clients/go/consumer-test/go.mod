// A program that uses the client as a user would, from the module as installed (test.sh copies
// this directory, adds offline replacements for the dependencies, then `go get`s the module from
// a local proxy). Its own module, so it is not part of the client's module zip.
module example.com/leased-consumer

go 1.19
