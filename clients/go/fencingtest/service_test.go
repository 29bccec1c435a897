package fencingtest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/leased-dev/leased/clients/go/fencing"
	"github.com/leased-dev/leased/clients/go/lease"
)

// The test's own gRPC service, a fenced resource: fencingtest.Docs keeps documents in memory.
// Write takes "key\nbody" and stores body under key; Append is its streaming form (a client
// stream of "key\nbody" messages, answered once at the end). Hand-written (no protoc here):
// grpc-go serves any ServiceDesc.
const (
	writeMethod  = "/fencingtest.Docs/Write"
	appendMethod = "/fencingtest.Docs/Append"
)

var docsDesc = grpc.ServiceDesc{
	ServiceName: "fencingtest.Docs",
	HandlerType: (*interface{})(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Write", Handler: writeHandler}},
	Streams:     []grpc.StreamDesc{{StreamName: "Append", Handler: appendHandler, ClientStreams: true}},
}

// docServer is one server of the service, with its own documents.
type docServer struct {
	addr   string
	server *grpc.Server

	mu      sync.Mutex
	bodies  map[string]string
	history map[string][]uint64 // per key, the token of every write the handler made, in order
	handled int                 // handler runs
}

// services are the servers the tests call: fenced with each mark store, and not fenced.
type services struct {
	memoryMarks, postgresMarks, redisMarks, unfenced *docServer
	marksDB                                          *sql.DB
}

func startServices() (*services, error) {
	marksDB, err := openPostgres(postgresURL)
	if err != nil {
		return nil, err
	}
	s := &services{marksDB: marksDB}
	stores := []struct {
		server **docServer
		marks  fencing.MarkStore
		fenced bool
	}{
		{&s.memoryMarks, nil, true}, // the default: in process
		{&s.postgresMarks, fencing.NewPostgresMarks(marksDB, "grpc:"), true},
		{&s.redisMarks, fencing.NewRedisMarks(poolDoer(resource), "fence:grpc:"), true},
		{&s.unfenced, nil, false},
	}
	for _, store := range stores {
		var options []grpc.ServerOption
		if store.fenced {
			fence := fencing.NewInterceptor(fencing.Options{Marks: store.marks})
			options = append(options, grpc.UnaryInterceptor(fence.Unary), grpc.StreamInterceptor(fence.Stream))
		}
		server, err := startDocServer(options...)
		if err != nil {
			s.stop()
			return nil, err
		}
		*store.server = server
	}
	return s, nil
}

func startDocServer(options ...grpc.ServerOption) (*docServer, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &docServer{
		addr:    listener.Addr().String(),
		server:  grpc.NewServer(options...),
		bodies:  map[string]string{},
		history: map[string][]uint64{},
	}
	d.server.RegisterService(&docsDesc, d)
	go func() { _ = d.server.Serve(listener) }()
	return d, nil
}

func (s *services) stop() {
	for _, server := range []*docServer{s.memoryMarks, s.postgresMarks, s.redisMarks, s.unfenced} {
		if server != nil {
			server.server.Stop()
		}
	}
	s.marksDB.Close()
}

// server is the one a writer of kind calls, fenced or not.
func (s *services) server(kind string, fenced bool) *docServer {
	switch {
	case !fenced:
		return s.unfenced
	case kind == grpcPostgresMarks:
		return s.postgresMarks
	case kind == grpcRedisMarks:
		return s.redisMarks
	}
	return s.memoryMarks
}

func writeHandler(srv interface{}, ctx context.Context, decode func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	request := new(wrapperspb.StringValue)
	if err := decode(request); err != nil {
		return nil, err
	}
	handle := func(ctx context.Context, request interface{}) (interface{}, error) {
		return srv.(*docServer).write(ctx, request.(*wrapperspb.StringValue).Value)
	}
	if interceptor == nil {
		return handle(ctx, request)
	}
	return interceptor(ctx, request, &grpc.UnaryServerInfo{Server: srv, FullMethod: writeMethod}, handle)
}

func appendHandler(srv interface{}, stream grpc.ServerStream) error {
	written := 0
	for {
		request := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(request); err != nil {
			if err == io.EOF {
				return stream.SendMsg(wrapperspb.String(fmt.Sprintf("%d written", written)))
			}
			return err
		}
		if _, err := srv.(*docServer).write(stream.Context(), request.Value); err != nil {
			return err
		}
		written++
	}
}

// write stores "key\nbody", recording the call's token: the one the interceptor accepted, or,
// on the server that does not fence, the one the call carries.
func (d *docServer) write(ctx context.Context, request string) (*wrapperspb.StringValue, error) {
	key, body, ok := strings.Cut(request, "\n")
	if !ok {
		return nil, status.Error(codes.InvalidArgument, `the request must be "key\nbody"`)
	}
	// A body "pause <duration>" makes the handler stall before it writes, as a service paused
	// mid-call (GC, a slow disk) would.
	if pause, err := time.ParseDuration(strings.TrimPrefix(body, "pause ")); err == nil {
		time.Sleep(pause)
	}
	claim, fenced := fencing.ClaimFromContext(ctx)
	token := claim.Token
	if !fenced {
		md, _ := metadata.FromIncomingContext(ctx)
		if values := md.Get(lease.FencingTokenMetadata); len(values) == 1 {
			token, _ = fencing.ParseToken(lease.FencingTokenMetadata, values[0])
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.bodies[key] = body
	d.history[key] = append(d.history[key], token)
	d.handled++
	return wrapperspb.String("written"), nil
}

func (d *docServer) body(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bodies[key]
}

func (d *docServer) tokens(key string) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint64(nil), d.history[key]...)
}

func (d *docServer) handlerRuns() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.handled
}
