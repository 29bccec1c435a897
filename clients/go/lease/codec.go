package lease

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// codec encodes messages with google.golang.org/protobuf, the runtime the stubs are generated
// for. grpc-go's default codec goes through github.com/golang/protobuf, which Debian 12 ships
// at v1.3 (golang-github-golang-protobuf-1-3-dev, what golang-google-grpc-dev pulls in): that
// version cannot decode messages from today's protoc-gen-go and panics ("protobuf tag not
// enough fields"). Forcing this codec on every call works with any grpc-go version.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	message, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("lease: cannot encode %T: not a protobuf message", v)
	}
	return proto.Marshal(message)
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	message, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("lease: cannot decode into %T: not a protobuf message", v)
	}
	return proto.Unmarshal(data, message)
}

// Name is the content-subtype on the wire: "application/grpc+proto", which every gRPC server
// takes for protobuf.
func (codec) Name() string { return "proto" }

// callOptions go on every call the client makes.
var callOptions = []grpc.CallOption{grpc.ForceCodec(codec{})}

// detached keeps the values of a context (outgoing metadata such as a bearer token, tracing)
// but not its cancellation or deadline: for calls that must outlive the caller's context, such
// as the Acquire stream read after the caller gave up, the keepalive and the final release.
// (context.WithoutCancel does this from Go 1.21 on.)
type detached struct{ context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }
