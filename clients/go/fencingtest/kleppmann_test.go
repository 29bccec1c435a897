package fencingtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased-dev/leased/clients/go/internal/leasedtest"
	"github.com/leased-dev/leased/clients/go/lease"
)

// Holder 1 of Kleppmann's scenario is this test binary run again with these variables: a
// process of its own, so that the test can freeze it (SIGSTOP) in the middle of its work.
const (
	holderEnv       = "FENCING_TEST_HOLDER" // the writer's target, as JSON
	holderLeasedEnv = "FENCING_TEST_LEASED" // leased's host:port
	holderNameEnv   = "FENCING_TEST_NAME"   // the lease's name, also the resource's key
	holderTTL       = 500 * time.Millisecond
)

// holderMain is holder 1: it acquires the lease, connects to the resource, says "token <t>",
// then waits for a line on stdin before it writes "holder 1" (the test freezes it there), and
// says "accepted", "refused stale: <error>" or "failed: <error>".
func holderMain() int {
	var t target
	if err := json.Unmarshal([]byte(os.Getenv(holderEnv)), &t); err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	name := os.Getenv(holderNameEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := leasedtest.Dial(os.Getenv(holderLeasedEnv))
	if err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	w, err := newWriter(t)
	if err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	l, busy, err := lease.NewClient(conn).Acquire(ctx, name, lease.Options{TTL: holderTTL, Wait: 10 * time.Second})
	if err != nil || busy != nil {
		fmt.Println("failed: acquiring:", err, busy)
		return 1
	}
	fmt.Println("token", l.FencingToken())
	// Holder 1 has checked its lease and is about to write: the test freezes it here.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("failed:", err)
		return 1
	}
	switch err := w.write(ctx, l, name, "holder 1"); {
	case err == nil:
		fmt.Println("accepted")
	case isStale(err):
		fmt.Println("refused stale:", err)
	default:
		fmt.Println("failed:", err)
	}
	return 0 // without a release: the lease is long gone
}

// holder is holder 1's process, seen from the test.
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
}

func startHolder(t *testing.T, tg target, name string) *holder {
	spec, err := json.Marshal(tg)
	if err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: exec.Command(os.Args[0]), lines: make(chan string, 4)}
	h.cmd.Env = append(os.Environ(), holderEnv+"="+string(spec), holderLeasedEnv+"="+stack.Addr, holderNameEnv+"="+name)
	h.cmd.Stderr = &h.stderr
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			h.lines <- scanner.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Signal(syscall.SIGCONT)
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	})
	return h
}

// next is holder 1's next line; the test fails if none comes within 30 s.
func (h *holder) next(t *testing.T) string {
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("holder 1 exited without a word; its stderr:\n%s", h.stderr.String())
		}
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("holder 1 said nothing for 30 s; its stderr:\n%s", h.stderr.String())
	}
	return ""
}

func (h *holder) signal(t *testing.T, sig syscall.Signal) {
	if err := h.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling holder 1 (%v): %v", sig, err)
	}
}

// waitStopped returns once every thread of holder 1 is stopped (state T in /proc), failing the
// test after 10 s.
func (h *holder) waitStopped(t *testing.T) {
	tasks := fmt.Sprintf("/proc/%d/task", h.cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		entries, err := os.ReadDir(tasks)
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, entry := range entries {
			stat, err := os.ReadFile(tasks + "/" + entry.Name() + "/stat")
			// The state is the first field after the command, which is in parentheses.
			if i := bytes.LastIndexByte(stat, ')'); err == nil && i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't') {
				stopped++
			}
		}
		if stopped == len(entries) {
			return
		}
	}
	t.Fatal("holder 1 did not stop within 10 s of SIGSTOP")
}

// TestKleppmannScenario plays the scenario fencing exists for, against each adapter: holder 1
// (a process) acquires a 500 ms lease and is frozen (SIGSTOP) just before its write; once its
// lease has long expired, holder 2 acquires it (a larger token) and writes; holder 1 is thawed
// (SIGCONT) and writes. Fenced, the resource refuses holder 1 and keeps holder 2's data. Not
// fenced (the same writes without the check), holder 1 overwrites holder 2: what fencing
// prevents, and proof that the scenario can fail.
func TestKleppmannScenario(t *testing.T) {
	for _, kind := range allKinds {
		for _, fenced := range []bool{true, false} {
			kind, fenced := kind, fenced
			if !fenced && (kind == grpcPostgresMarks || kind == grpcRedisMarks) {
				continue // one unfenced gRPC server serves as the contrast for the three stores
			}
			mode := "fenced"
			if !fenced {
				mode = "not-fenced"
			}
			t.Run(kind+"/"+mode, func(t *testing.T) {
				t.Parallel()
				kleppmann(t, kind, fenced, "kleppmann-"+kind+"-"+mode)
			})
		}
	}
}

func kleppmann(t *testing.T, kind string, fenced bool, name string) {
	tg := targetFor(kind, fenced)
	w, err := newWriter(tg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	client := leaseClient(t)

	holder1 := startHolder(t, tg, name)
	line := holder1.next(t)
	var token1 uint64
	if _, err := fmt.Sscanf(line, "token %d", &token1); err != nil {
		t.Fatalf("holder 1 said %q, not its token; stderr:\n%s", line, holder1.stderr.String())
	}
	holder1.signal(t, syscall.SIGSTOP)
	// The signal is asynchronous: until every thread has stopped, one could still read stdin.
	holder1.waitStopped(t)
	// Holder 1 reads this once it is thawed.
	if _, err := io.WriteString(holder1.stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * holderTTL) // well past holder 1's TTL: leased expires its lease

	lease2 := acquire(t, client, name, 10*time.Second)
	defer lease2.Close()
	token2 := lease2.FencingToken()
	if token2 <= token1 {
		t.Fatalf("holder 2's token %d is not above holder 1's %d", token2, token1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.write(ctx, lease2, name, "holder 2"); err != nil {
		t.Fatalf("holder 2's write (token %d): %v", token2, err)
	}

	holder1.signal(t, syscall.SIGCONT)
	result := holder1.next(t)
	body, err := readBody(tg, w, name)
	if err != nil {
		t.Fatal(err)
	}
	if fenced {
		if !strings.HasPrefix(result, "refused stale:") {
			t.Fatalf("with fencing, holder 1's write (token %d) after holder 2's (token %d) was not refused: %s", token1, token2, result)
		}
		if !strings.Contains(result, fmt.Sprint(token1)) || !strings.Contains(result, fmt.Sprint(token2)) {
			t.Errorf("the refusal does not name both tokens (%d, %d): %s", token1, token2, result)
		}
		if body != "holder 2" {
			t.Fatalf("with fencing, the resource holds %q, not holder 2's data", body)
		}
		t.Logf("with fencing: holder 1 (token %d) paused past its lease, holder 2 (token %d) wrote, holder 1 resumed and was %s; the resource holds %q",
			token1, token2, result, body)
		return
	}
	if result != "accepted" || body != "holder 1" {
		t.Fatalf("without fencing, holder 1's late write should overwrite holder 2's: holder 1 got %q, the resource holds %q", result, body)
	}
	t.Logf("without fencing: holder 1 (token %d) resumed after holder 2 (token %d) wrote, and overwrote it: the resource holds %q",
		token1, token2, body)
}
