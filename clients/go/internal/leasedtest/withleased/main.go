// Command withleased starts a real redis-server and leased (package leasedtest), runs the command
// it is given with LEASED_ADDR set to leased's host:port, stops both, and exits with the
// command's status. test.sh runs the consumer program under it: the consumer is a separate
// module, which cannot import this module's internal packages.
//
//	go run ./internal/leasedtest/withleased -- ./consumer
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withleased [--] command [args...]")
		os.Exit(2)
	}
	stack, err := leasedtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start redis-server and leased:", err)
		os.Exit(1)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "LEASED_ADDR="+stack.Addr)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	stack.Stop() // before exiting: os.Exit skips deferred calls
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "withleased:", err)
		os.Exit(1)
	}
}
