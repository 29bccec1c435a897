// Package leasedtest runs a real redis-server and leased for the tests, on free loopback ports.
// The leased binary is $LEASED_BIN (test.sh sets it; it builds target/debug/leased if needed).
package leasedtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/leased-dev/leased/clients/go/lease"
)

// startupTimeout is generous: the machine running the tests may be busy.
const startupTimeout = 20 * time.Second

// Stack is a redis-server and the leased processes serving from it.
type Stack struct {
	// Addr is the first leased's host:port.
	Addr      string
	redisAddr string
	dir       string

	mu        sync.Mutex // tests may start servers in parallel
	processes []*Process
}

// Process is one child process.
type Process struct {
	Addr   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once the process has exited

	stopSignal  syscall.Signal // what Stop sends: SIGTERM unless set
	removeAfter string         // a directory Stop removes once the process has exited
}

// Start starts redis-server (no persistence) and one leased; Stop stops them.
func Start() (*Stack, error) {
	dir, err := os.MkdirTemp("", "leased-go-test-")
	if err != nil {
		return nil, err
	}
	s := &Stack{dir: dir}
	s.redisAddr, err = s.StartRedis()
	if err != nil {
		s.Stop()
		return nil, err
	}
	leased, err := s.StartLeased()
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.Addr = leased.Addr
	return s, nil
}

// StartRedis starts a redis-server (no persistence) on a free loopback port and returns its
// host:port: Start's for leased, or one more, e.g. a Redis a test writes to as the resource.
// It stops with the stack.
func (s *Stack) StartRedis() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	redis, err := s.spawn("redis", addr, "redis-server", "--bind", "127.0.0.1",
		"--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", s.dir)
	if err != nil {
		return "", err
	}
	if err := waitUntil(redis, func() error { return redisPing(addr) }); err != nil {
		return "", err
	}
	return addr, nil
}

// StartPostgres runs a scratch PostgreSQL through script (the repository's
// scripts/postgres-scratch.sh) in a fresh directory, on a free loopback port, and returns its
// URL once ready (a func that connects, from the caller, which has a driver) succeeds. It stops
// with the stack (SIGINT: a fast shutdown), and its directory is removed.
func (s *Stack) StartPostgres(script string, ready func(url string) error) (string, error) {
	// Not under s.dir: the script hands the directory to the postgres user, who must reach it.
	dir, err := os.MkdirTemp("", "leased-go-postgres-")
	if err != nil {
		return "", err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	postgres, err := s.spawn("postgres", "", script, dir, strconv.Itoa(port))
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	postgres.stopSignal = syscall.SIGINT
	postgres.removeAfter = dir
	url := fmt.Sprintf("postgresql://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitUntil(postgres, func() error { return ready(url) }); err != nil {
		return "", err
	}
	return url, nil
}

// StartLeased starts another leased on the stack's Redis, e.g. for a test that stops it.
func (s *Stack) StartLeased() (*Process, error) {
	binary := os.Getenv("LEASED_BIN")
	if binary == "" {
		return nil, errors.New("LEASED_BIN is not set: run the tests through clients/go/test.sh")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	leased, err := s.spawn("leased", addr, binary, "serve", "--listen", addr,
		"--redis-url", "redis://"+s.redisAddr)
	if err != nil {
		return nil, err
	}
	conn, err := Dial(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := lease.NewClient(conn)
	err = waitUntil(leased, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := client.Describe(ctx, "go-ready")
		return err
	})
	if err != nil {
		return nil, err
	}
	return leased, nil
}

// Stop stops every process (SIGTERM, then SIGKILL) and removes the scratch directory.
func (s *Stack) Stop() {
	s.mu.Lock()
	processes := s.processes
	s.mu.Unlock()
	for i := len(processes) - 1; i >= 0; i-- {
		processes[i].Stop()
	}
	os.RemoveAll(s.dir)
}

// Dial opens a plaintext connection, as every test client does: one per simulated process.
// options add to it (an interceptor that counts calls, ...).
func Dial(addr string, options ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.Dial(addr, append([]grpc.DialOption{grpc.WithInsecure()}, options...)...)
}

// Proxy forwards TCP connections to a server and can cut them all at once: a connection reset
// as the client sees it, while the server lives on and new connections go through.
type Proxy struct {
	// Addr is the proxy's host:port: dial it instead of the server's.
	Addr     string
	target   string
	listener net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{} // both ends of every connection open now
}

// StartProxy forwards to target until Close.
func StartProxy(target string) (*Proxy, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: listener.Addr().String(), target: target, listener: listener, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

// pipe copies one direction; when either side ends, both are closed.
func (p *Proxy) pipe(from, to net.Conn) {
	_, _ = io.Copy(to, from)
	from.Close()
	to.Close()
	p.mu.Lock()
	delete(p.conns, from)
	delete(p.conns, to)
	p.mu.Unlock()
}

// Cut resets every connection open now (RST, as when a peer or a middlebox drops it) and
// reports how many there were.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for conn := range p.conns {
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0) // close with RST rather than FIN
		}
		conn.Close()
	}
	cut := len(p.conns) / 2
	p.conns = map[net.Conn]struct{}{}
	return cut
}

// Close stops accepting and cuts what is open.
func (p *Proxy) Close() {
	p.listener.Close()
	p.Cut()
}

func (s *Stack) spawn(name, addr, binary string, args ...string) (*Process, error) {
	out, err := os.CreateTemp(s.dir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// If the test binary dies without cleaning up, take the child down with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	p := &Process{Addr: addr, cmd: cmd, log: out.Name(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.processes = append(s.processes, p)
	s.mu.Unlock()
	return p, nil
}

// Signal sends sig to the process (SIGKILL, SIGSTOP to freeze it, ...).
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop ends the process: SIGTERM (after SIGCONT, in case it was frozen; SIGINT for PostgreSQL),
// SIGKILL after 10 s.
func (p *Process) Stop() {
	if p.removeAfter != "" {
		defer os.RemoveAll(p.removeAfter)
	}
	select {
	case <-p.exited:
		return
	default:
	}
	stop := p.stopSignal
	if stop == 0 {
		stop = syscall.SIGTERM
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(stop)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitUntil polls ready until it succeeds, failing early if the process exits.
func waitUntil(p *Process, ready func() error) error {
	deadline := time.Now().Add(startupTimeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during startup:\n%s", p.cmd.Path, tail(p.log))
		default:
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s (%v):\n%s",
				p.cmd.Path, startupTimeout, err, tail(p.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q", line)
	}
	return nil
}

func freePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}
