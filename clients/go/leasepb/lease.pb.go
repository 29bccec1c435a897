// leased: named leases (distributed locks) with fencing tokens.
//
// A lease is held by at most one holder at a time, or by at most `limit` holders for a counting
// lease (a semaphore: AcquireRequest.limit), or, as a read-write lock, by one exclusive holder or
// by shared holders (AcquireRequest.shared). It ends when its holder releases it, or when its TTL
// passes without a renewal (plus its lock-delay, if it asked for one); then anyone may acquire it.
// Every grant carries a fencing token that is strictly larger than every token granted before for
// the same name, whichever permit, so a resource protected by the lease can reject writes carrying
// a smaller token than the largest it has seen: a holder that lost its lease without noticing (a GC
// pause, a partition) is fenced off.
//
// Fencing metadata (a convention for the services a lease protects, not read by leased): a call
// to a fenced service carries the lease's name and token as two gRPC metadata entries (HTTP
// headers elsewhere), `leased-lease-name: <name>` and `leased-fencing-token: <token in decimal,
// 1 to 2^63-1>`. The clients' guards attach them on request, and the fencing middleware of each
// client refuses a token below the largest it has seen for that name (FAILED_PRECONDITION naming
// both tokens) and a missing, zero, negative or non-numeric entry (INVALID_ARGUMENT naming the
// entry). Tokens are floored at the grant's Unix time in microseconds (about 1.8e15 in 2026), so
// they fit a signed 64-bit integer and stay below 2^53 (exact as a JavaScript number) until 2255.
//
// Errors, for every RPC:
//   INVALID_ARGUMENT    a field is out of range; the message names the field.
//   UNAVAILABLE         the backing store (Redis) did not answer within the server's timeout, or the
//                       server is shutting down. Nothing was granted that the store did not confirm;
//                       retry, preferably against another replica.
//   FAILED_PRECONDITION Acquire with a `limit` other than the one the name's current holders were
//                       granted with (the message names the limit in force); Acquire with an own
//                       `lease_id` released in the last minute, or whose waiting call a retry
//                       with the same id replaced, or that holds a grant of the name of another
//                       mode or limit than the retry asks for (the message names `shared` or
//                       `limit`).
//   RESOURCE_EXHAUSTED  a server limit was reached: waiters per name (the whole queue, all replicas),
//                       shared holders of one name (--max-limit), leases held at once on one
//                       Renew stream.
//                       (Past the HTTP/2 streams per connection, a call waits in the client until
//                       a stream ends; open more connections for more streams.)
//   OUT_OF_RANGE        a request message larger than the server's --max-message-bytes.
//   INTERNAL            a message that does not decode (e.g. invalid UTF-8 in a string field), or
//                       Redis refused a script (a Lua error, or a key of this lease that something
//                       other than leased wrote with another type). Retrying will not help; the
//                       server logs the lease name.
//   UNAUTHENTICATED     access control is on and the call has no valid bearer token.
//   PERMISSION_DENIED   the token may not do this operation on this lease name (List: on every
//                       name under the prefix). The operations are acquire, renew, release,
//                       describe, watch, check, list and revoke; only tokens that name `revoke`
//                       may revoke. Also: Acquire, Renew or Release of a grant that another token
//                       made with its own `lease_id` (the message names `lease_id`).
// Contention is never an error: a busy lease answers `not_granted`.
//
// Limits: `name` is 1 to 256 bytes of `A-Z a-z 0-9 . _ - : / @`; `holder` at most 256 bytes,
// without control characters (Unicode Cc), bidirectional formatting characters, or characters
// that show as nothing or a blank (see AcquireRequest.holder); `ttl_ms` from 10 to the server's --max-ttl (default 24 h), on Renew
// also 0 (keep the granted TTL); `wait_ms` from 0 to --max-wait (default 10 min); `limit` from 0
// to --max-limit (default 10,000); `lock_delay_ms` from 0 to 60,000; Acquire's own `lease_id`
// empty or 22 to 128 characters of `A-Z a-z 0-9 _ -`, Renew's and Release's non-empty and at most
// 128 bytes; `fencing_token` of CheckToken non-zero; List's `prefix` 0 to 256 bytes of the name
// alphabet, `page_size` at most 1000; Revoke's `reason` 1 to 256 bytes, as `holder`.
// Text the server shows to others (`holder`, in Waiting, NotGranted and Describe) cannot carry
// characters that a terminal acts on instead of showing (escape sequences, reordering), nor ones
// that make two holders read the same (zero-width and other invisible characters); `name` is
// limited by its alphabet, and `lease_id` is never echoed or logged. A holder stored before this
// rule, or written into Redis by something else, comes back as stored: display holders escaped.

// Code generated by protoc-gen-go. DO NOT EDIT.
// versions:
// 	protoc-gen-go v1.28.1
// 	protoc        v3.21.12
// source: lease/v1/lease.proto

package leasepb

import (
	protoreflect "google.golang.org/protobuf/reflect/protoreflect"
	protoimpl "google.golang.org/protobuf/runtime/protoimpl"
	timestamppb "google.golang.org/protobuf/types/known/timestamppb"
	reflect "reflect"
	sync "sync"
)

const (
	// Verify that this generated code is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(20 - protoimpl.MinVersion)
	// Verify that runtime/protoimpl is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(protoimpl.MaxVersion - 20)
)

// What the event reports.
type WatchEvent_Cause int32

const (
	WatchEvent_CAUSE_UNSPECIFIED WatchEvent_Cause = 0
	// The current state: the first event of every stream, and after events may have been missed.
	WatchEvent_CAUSE_SNAPSHOT WatchEvent_Cause = 1
	// A new grant: `holder` and `fencing_token` are the new holder's.
	WatchEvent_CAUSE_GRANTED WatchEvent_Cause = 2
	// The holder released the lease.
	WatchEvent_CAUSE_RELEASED WatchEvent_Cause = 3
	// The holder's TTL passed without a renewal (its lock-delay, if any, starts now).
	WatchEvent_CAUSE_EXPIRED WatchEvent_Cause = 4
	// An operator revoked the lease (LeaseAdminService.Revoke); `reason` is theirs.
	WatchEvent_CAUSE_REVOKED WatchEvent_Cause = 5
)

// Enum value maps for WatchEvent_Cause.
var (
	WatchEvent_Cause_name = map[int32]string{
		0: "CAUSE_UNSPECIFIED",
		1: "CAUSE_SNAPSHOT",
		2: "CAUSE_GRANTED",
		3: "CAUSE_RELEASED",
		4: "CAUSE_EXPIRED",
		5: "CAUSE_REVOKED",
	}
	WatchEvent_Cause_value = map[string]int32{
		"CAUSE_UNSPECIFIED": 0,
		"CAUSE_SNAPSHOT":    1,
		"CAUSE_GRANTED":     2,
		"CAUSE_RELEASED":    3,
		"CAUSE_EXPIRED":     4,
		"CAUSE_REVOKED":     5,
	}
)

func (x WatchEvent_Cause) Enum() *WatchEvent_Cause {
	p := new(WatchEvent_Cause)
	*p = x
	return p
}

func (x WatchEvent_Cause) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (WatchEvent_Cause) Descriptor() protoreflect.EnumDescriptor {
	return file_lease_v1_lease_proto_enumTypes[0].Descriptor()
}

func (WatchEvent_Cause) Type() protoreflect.EnumType {
	return &file_lease_v1_lease_proto_enumTypes[0]
}

func (x WatchEvent_Cause) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use WatchEvent_Cause.Descriptor instead.
func (WatchEvent_Cause) EnumDescriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{15, 0}
}

type AcquireRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to acquire: 1 to 256 bytes of `A-Z a-z 0-9 . _ - : / @`. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// Who is asking, for humans and for `Describe` (e.g. "host-a/pid-42"): at most 256 bytes of
	// UTF-8 text without control characters (Unicode Cc: C0 such as NUL, ESC, newline and tab; DEL;
	// C1), bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066
	// to U+2069), or characters that show as nothing or a blank: the other format characters
	// (Unicode Cf: U+00AD, U+0600 to U+0605, U+06DD, U+070F, U+0890, U+0891, U+08E2, U+180E,
	// U+200B to U+200D, U+2060 to U+2064, U+206A to U+206F, U+FEFF, U+FFF9 to U+FFFB, U+110BD,
	// U+110CD, U+13430 to U+1343F, U+1BCA0 to U+1BCA3, U+1D173 to U+1D17A, and the tag block
	// U+E0000 to U+E007F), the separators U+2028 and U+2029, U+034F and the Hangul fillers U+115F,
	// U+1160, U+3164 and U+FFA0; INVALID_ARGUMENT names the first such character and its byte
	// offset. Optional.
	Holder string `protobuf:"bytes,2,opt,name=holder,proto3" json:"holder,omitempty"`
	// How long the lease lasts without a renewal, in milliseconds: 10 to the server's maximum.
	TtlMs int64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// How long to wait for a busy lease, in milliseconds: 0 (try once) to the server's maximum.
	WaitMs int64 `protobuf:"varint,4,opt,name=wait_ms,json=waitMs,proto3" json:"wait_ms,omitempty"`
	// How many holders may hold `name` at once: 0 or 1 is an exclusive lease; N > 1 a counting
	// lease (a semaphore) of N permits, each grant one permit with its own `lease_id`, renewed,
	// released and expiring on its own. Every holder of a name must ask for the same limit: while
	// any permit is taken, another limit answers FAILED_PRECONDITION naming the limit in force.
	// At most the server's --max-limit (default 10,000).
	Limit uint32 `protobuf:"varint,5,opt,name=limit,proto3" json:"limit,omitempty"`
	// Lock-delay, in milliseconds (0 to 60,000): if this grant ends by expiry (its holder stopped
	// renewing: it died, or is paused or cut off and may still think it holds the lease), the name
	// (this permit, for a counting lease) is granted to nobody until `lock_delay_ms` after the
	// expiry, giving that holder time to notice before the next one starts. A release ends the
	// lease at once, without delay; a late release by the expired holder does not end the delay.
	LockDelayMs int64 `protobuf:"varint,6,opt,name=lock_delay_ms,json=lockDelayMs,proto3" json:"lock_delay_ms,omitempty"`
	// A shared (read) grant: the shared grants of a name coexist, and an exclusive grant (the
	// default) excludes every other grant, shared or not, which makes the name a read-write lock.
	// Each shared grant has its own `lease_id`, fencing token, TTL, renewal, release, lock-delay,
	// revoke and CheckToken; a shared grant in its lock-delay keeps exclusive callers out, not
	// shared ones. At most the server's --max-limit shared holders at once (RESOURCE_EXHAUSTED
	// past it). Shared and exclusive callers queue together, first come, first served (Acquire);
	// a try-once shared call is granted only while nothing but shared grants hold the name and
	// nobody waits. Only with `limit` 0 or 1: a counting lease has no modes (INVALID_ARGUMENT
	// naming `shared`). A name held shared answers an exclusive caller `not_granted`, with the
	// shared grant that frees soonest, as for a counting lease.
	//
	// There is no upgrade from shared to exclusive, nor downgrade: release, then acquire again.
	// Two shared holders that both wait to upgrade would wait for each other forever, and a
	// downgrade that keeps the name while a writer waits is where read-write locks elsewhere have
	// let a write in beside a read.
	//
	// Fencing with modes: tokens increase across every grant of the name, shared or exclusive. A
	// resource fences writes with the largest exclusive token it has seen (rejecting writes with a
	// smaller one); shared tokens order reads after writes: a shared token is larger than the token
	// of every exclusive grant before it, so a read carrying it comes after those writes.
	Shared bool `protobuf:"varint,7,opt,name=shared,proto3" json:"shared,omitempty"`
	// The caller's own lease id, to make Acquire safe to retry and to give up (see Acquire): 22 to
	// 128 characters of `A-Z a-z 0-9 _ -` (INVALID_ARGUMENT naming `lease_id` otherwise); empty
	// lets the server generate one. Make it 128 bits or more from a cryptographically secure random
	// generator (the clients send 32 hex digits from the OS's, 16 random bytes): the lease id is the
	// holder's secret, and without access control anyone who can guess it can renew or release the
	// lease. An id of fewer than 6 distinct characters is refused as guessable (INVALID_ARGUMENT
	// naming `lease_id`; a random one is, with odds below 1e-12). With access control on, a grant
	// made with an own id is bound to the token that made it (the token's name in the tokens file):
	// another token's Acquire, Renew or Release of it is PERMISSION_DENIED. The server never logs
	// it and never shows it to others. A new acquisition takes a new id; reuse one only to retry.
	LeaseId string `protobuf:"bytes,8,opt,name=lease_id,json=leaseId,proto3" json:"lease_id,omitempty"`
}

func (x *AcquireRequest) Reset() {
	*x = AcquireRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[0]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *AcquireRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireRequest) ProtoMessage() {}

func (x *AcquireRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[0]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireRequest.ProtoReflect.Descriptor instead.
func (*AcquireRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{0}
}

func (x *AcquireRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *AcquireRequest) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *AcquireRequest) GetTtlMs() int64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *AcquireRequest) GetWaitMs() int64 {
	if x != nil {
		return x.WaitMs
	}
	return 0
}

func (x *AcquireRequest) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

func (x *AcquireRequest) GetLockDelayMs() int64 {
	if x != nil {
		return x.LockDelayMs
	}
	return 0
}

func (x *AcquireRequest) GetShared() bool {
	if x != nil {
		return x.Shared
	}
	return false
}

func (x *AcquireRequest) GetLeaseId() string {
	if x != nil {
		return x.LeaseId
	}
	return ""
}

type AcquireResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Types that are assignable to Result:
	//
	//	*AcquireResponse_Granted
	//	*AcquireResponse_Waiting
	//	*AcquireResponse_NotGranted
	Result isAcquireResponse_Result `protobuf_oneof:"result"`
}

func (x *AcquireResponse) Reset() {
	*x = AcquireResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[1]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *AcquireResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*AcquireResponse) ProtoMessage() {}

func (x *AcquireResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[1]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use AcquireResponse.ProtoReflect.Descriptor instead.
func (*AcquireResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{1}
}

func (m *AcquireResponse) GetResult() isAcquireResponse_Result {
	if m != nil {
		return m.Result
	}
	return nil
}

func (x *AcquireResponse) GetGranted() *Granted {
	if x, ok := x.GetResult().(*AcquireResponse_Granted); ok {
		return x.Granted
	}
	return nil
}

func (x *AcquireResponse) GetWaiting() *Waiting {
	if x, ok := x.GetResult().(*AcquireResponse_Waiting); ok {
		return x.Waiting
	}
	return nil
}

func (x *AcquireResponse) GetNotGranted() *NotGranted {
	if x, ok := x.GetResult().(*AcquireResponse_NotGranted); ok {
		return x.NotGranted
	}
	return nil
}

type isAcquireResponse_Result interface {
	isAcquireResponse_Result()
}

type AcquireResponse_Granted struct {
	// Terminal: the caller now holds the lease.
	Granted *Granted `protobuf:"bytes,1,opt,name=granted,proto3,oneof"`
}

type AcquireResponse_Waiting struct {
	// Not terminal: the lease is busy and the server is waiting for it.
	Waiting *Waiting `protobuf:"bytes,2,opt,name=waiting,proto3,oneof"`
}

type AcquireResponse_NotGranted struct {
	// Terminal: the lease stayed busy (at once with `wait_ms = 0`, or for the whole `wait_ms`).
	NotGranted *NotGranted `protobuf:"bytes,3,opt,name=not_granted,json=notGranted,proto3,oneof"`
}

func (*AcquireResponse_Granted) isAcquireResponse_Result() {}

func (*AcquireResponse_Waiting) isAcquireResponse_Result() {}

func (*AcquireResponse_NotGranted) isAcquireResponse_Result() {}

// The lease is yours until `expires_at`, unless renewed.
type Granted struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease's name, as requested.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The holder's secret: needed to renew and release. AcquireRequest.lease_id when the caller set
	// it, otherwise 128 random bits, hex-encoded. Keep it private; the server never logs it and
	// Describe never returns it.
	LeaseId string `protobuf:"bytes,2,opt,name=lease_id,json=leaseId,proto3" json:"lease_id,omitempty"`
	// Strictly larger than every token granted before for this name. Pass it to the resource the
	// lease protects, which must reject any token smaller than the largest it has seen.
	FencingToken uint64 `protobuf:"varint,3,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// The granted TTL in milliseconds.
	TtlMs int64 `protobuf:"varint,4,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// When the lease ends unless renewed, on the store's clock.
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,5,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
}

func (x *Granted) Reset() {
	*x = Granted{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[2]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *Granted) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Granted) ProtoMessage() {}

func (x *Granted) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[2]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Granted.ProtoReflect.Descriptor instead.
func (*Granted) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{2}
}

func (x *Granted) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *Granted) GetLeaseId() string {
	if x != nil {
		return x.LeaseId
	}
	return ""
}

func (x *Granted) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *Granted) GetTtlMs() int64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *Granted) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

// Sent while waiting: who holds the lease now, and the caller's place in the queue. For a counting
// lease, `holder`, `fencing_token` and `remaining_ms` describe the permit that frees soonest.
type Waiting struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The current holder's `holder` string (may be empty).
	Holder string `protobuf:"bytes,1,opt,name=holder,proto3" json:"holder,omitempty"`
	// The current holder's fencing token (0 if unknown).
	FencingToken uint64 `protobuf:"varint,2,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// Milliseconds until the current holder's lease (permit) frees unless renewed, lock-delay
	// included; -1 if it has no expiry (a key left by something other than leased). An empty
	// `holder` with token 0 and `remaining_ms` 0 means nobody holds it right now: it is being
	// handed to a caller ahead of you.
	RemainingMs int64 `protobuf:"varint,3,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// Your place in the name's queue, across every replica: 1 = next in line.
	Position uint32 `protobuf:"varint,4,opt,name=position,proto3" json:"position,omitempty"`
	// Permits taken now (held, or in their lock-delay): 1 for a held exclusive lease, the number of
	// shared grants for a name held shared.
	Held uint32 `protobuf:"varint,5,opt,name=held,proto3" json:"held,omitempty"`
	// The limit in force (1 for an exclusive or read-write lease); 0 when no permit is taken.
	Limit uint32 `protobuf:"varint,6,opt,name=limit,proto3" json:"limit,omitempty"`
}

func (x *Waiting) Reset() {
	*x = Waiting{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[3]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *Waiting) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Waiting) ProtoMessage() {}

func (x *Waiting) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[3]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Waiting.ProtoReflect.Descriptor instead.
func (*Waiting) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{3}
}

func (x *Waiting) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *Waiting) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *Waiting) GetRemainingMs() int64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *Waiting) GetPosition() uint32 {
	if x != nil {
		return x.Position
	}
	return 0
}

func (x *Waiting) GetHeld() uint32 {
	if x != nil {
		return x.Held
	}
	return 0
}

func (x *Waiting) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

// The terminal answer when the lease stayed busy: who holds it. For a counting lease, `holder`,
// `fencing_token` and `remaining_ms` describe the permit that frees soonest.
type NotGranted struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The current holder's `holder` string (may be empty).
	Holder string `protobuf:"bytes,1,opt,name=holder,proto3" json:"holder,omitempty"`
	// The current holder's fencing token (0 if unknown).
	FencingToken uint64 `protobuf:"varint,2,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// Milliseconds until the current holder's lease (permit) frees unless renewed, lock-delay
	// included; -1 if it has no expiry. Empty `holder`, token 0 and `remaining_ms` 0: nobody holds
	// it right now, but it is being handed to a caller waiting ahead of you.
	RemainingMs int64 `protobuf:"varint,3,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// Permits taken now (held, or in their lock-delay): 1 for a held exclusive lease, the number of
	// shared grants for a name held shared.
	Held uint32 `protobuf:"varint,5,opt,name=held,proto3" json:"held,omitempty"`
	// The limit in force (1 for an exclusive or read-write lease); 0 when no permit is taken.
	Limit uint32 `protobuf:"varint,6,opt,name=limit,proto3" json:"limit,omitempty"`
}

func (x *NotGranted) Reset() {
	*x = NotGranted{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[4]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *NotGranted) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*NotGranted) ProtoMessage() {}

func (x *NotGranted) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[4]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use NotGranted.ProtoReflect.Descriptor instead.
func (*NotGranted) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{4}
}

func (x *NotGranted) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *NotGranted) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *NotGranted) GetRemainingMs() int64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *NotGranted) GetHeld() uint32 {
	if x != nil {
		return x.Held
	}
	return 0
}

func (x *NotGranted) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

type RenewRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to renew. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The `lease_id` from `Granted`. Required, at most 128 bytes.
	LeaseId string `protobuf:"bytes,2,opt,name=lease_id,json=leaseId,proto3" json:"lease_id,omitempty"`
	// The new TTL in milliseconds, counted from now: 10 to the server's maximum, or 0 to keep the
	// TTL the lease was granted with.
	TtlMs int64 `protobuf:"varint,3,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
}

func (x *RenewRequest) Reset() {
	*x = RenewRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[5]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RenewRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RenewRequest) ProtoMessage() {}

func (x *RenewRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[5]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RenewRequest.ProtoReflect.Descriptor instead.
func (*RenewRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{5}
}

func (x *RenewRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *RenewRequest) GetLeaseId() string {
	if x != nil {
		return x.LeaseId
	}
	return ""
}

func (x *RenewRequest) GetTtlMs() int64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

type RenewResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease this answer is for (several leases may share one stream).
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// Types that are assignable to Result:
	//
	//	*RenewResponse_Renewed
	//	*RenewResponse_Lost
	Result isRenewResponse_Result `protobuf_oneof:"result"`
}

func (x *RenewResponse) Reset() {
	*x = RenewResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[6]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RenewResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RenewResponse) ProtoMessage() {}

func (x *RenewResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[6]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RenewResponse.ProtoReflect.Descriptor instead.
func (*RenewResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{6}
}

func (x *RenewResponse) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (m *RenewResponse) GetResult() isRenewResponse_Result {
	if m != nil {
		return m.Result
	}
	return nil
}

func (x *RenewResponse) GetRenewed() *Renewed {
	if x, ok := x.GetResult().(*RenewResponse_Renewed); ok {
		return x.Renewed
	}
	return nil
}

func (x *RenewResponse) GetLost() *Lost {
	if x, ok := x.GetResult().(*RenewResponse_Lost); ok {
		return x.Lost
	}
	return nil
}

type isRenewResponse_Result interface {
	isRenewResponse_Result()
}

type RenewResponse_Renewed struct {
	// The lease is still yours, until the new `expires_at`.
	Renewed *Renewed `protobuf:"bytes,2,opt,name=renewed,proto3,oneof"`
}

type RenewResponse_Lost struct {
	// The lease is gone: expired, released, or held by someone else. Stop using it.
	Lost *Lost `protobuf:"bytes,3,opt,name=lost,proto3,oneof"`
}

func (*RenewResponse_Renewed) isRenewResponse_Result() {}

func (*RenewResponse_Lost) isRenewResponse_Result() {}

type Renewed struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease's fencing token, unchanged since the grant.
	FencingToken uint64 `protobuf:"varint,1,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// The TTL now in force, in milliseconds.
	TtlMs int64 `protobuf:"varint,2,opt,name=ttl_ms,json=ttlMs,proto3" json:"ttl_ms,omitempty"`
	// When the lease ends unless renewed again, on the store's clock.
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,3,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
}

func (x *Renewed) Reset() {
	*x = Renewed{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[7]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *Renewed) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Renewed) ProtoMessage() {}

func (x *Renewed) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[7]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Renewed.ProtoReflect.Descriptor instead.
func (*Renewed) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{7}
}

func (x *Renewed) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *Renewed) GetTtlMs() int64 {
	if x != nil {
		return x.TtlMs
	}
	return 0
}

func (x *Renewed) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

type Lost struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// Why: "expired or released", "held by another holder", or "revoked: " and the operator's
	// reason (LeaseAdminService.Revoke). A lease in its lock-delay has expired.
	Reason string `protobuf:"bytes,1,opt,name=reason,proto3" json:"reason,omitempty"`
}

func (x *Lost) Reset() {
	*x = Lost{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[8]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *Lost) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Lost) ProtoMessage() {}

func (x *Lost) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[8]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Lost.ProtoReflect.Descriptor instead.
func (*Lost) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{8}
}

func (x *Lost) GetReason() string {
	if x != nil {
		return x.Reason
	}
	return ""
}

type ReleaseRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to release. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The `lease_id` from `Granted`. Required, at most 128 bytes.
	LeaseId string `protobuf:"bytes,2,opt,name=lease_id,json=leaseId,proto3" json:"lease_id,omitempty"`
}

func (x *ReleaseRequest) Reset() {
	*x = ReleaseRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[9]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ReleaseRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseRequest) ProtoMessage() {}

func (x *ReleaseRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[9]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseRequest.ProtoReflect.Descriptor instead.
func (*ReleaseRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{9}
}

func (x *ReleaseRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *ReleaseRequest) GetLeaseId() string {
	if x != nil {
		return x.LeaseId
	}
	return ""
}

type ReleaseResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// True if this call ended the lease; false if the caller did not hold it (already released,
	// expired or taken over). Either way, the caller no longer holds the lease.
	Released bool `protobuf:"varint,1,opt,name=released,proto3" json:"released,omitempty"`
}

func (x *ReleaseResponse) Reset() {
	*x = ReleaseResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[10]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ReleaseResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ReleaseResponse) ProtoMessage() {}

func (x *ReleaseResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[10]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ReleaseResponse.ProtoReflect.Descriptor instead.
func (*ReleaseResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{10}
}

func (x *ReleaseResponse) GetReleased() bool {
	if x != nil {
		return x.Released
	}
	return false
}

type DescribeRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to describe. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
}

func (x *DescribeRequest) Reset() {
	*x = DescribeRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[11]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *DescribeRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*DescribeRequest) ProtoMessage() {}

func (x *DescribeRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[11]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use DescribeRequest.ProtoReflect.Descriptor instead.
func (*DescribeRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{11}
}

func (x *DescribeRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

type DescribeResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// True if someone holds the lease now, or a holder's lock-delay runs. When false, the fields
	// about holders are zero (`waiters` may not be: they are being served).
	Held bool `protobuf:"varint,1,opt,name=held,proto3" json:"held,omitempty"`
	// The holder's `holder` string (may be empty). For a counting lease, fields 2 to 5 describe
	// the holder with the smallest token (the first of `holders`).
	Holder string `protobuf:"bytes,2,opt,name=holder,proto3" json:"holder,omitempty"`
	// The holder's fencing token.
	FencingToken uint64 `protobuf:"varint,3,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// Milliseconds until the lease frees unless renewed, lock-delay included; -1 if it has no
	// expiry.
	RemainingMs int64 `protobuf:"varint,4,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// When the lease expires unless renewed, on the store's clock (unset if it has no expiry). In
	// the lock-delay after an expiry, it is in the past while `remaining_ms` is not yet 0.
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,5,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
	// The limit in force: 1 for an exclusive or read-write lease, N for a counting lease; 0 when
	// `held` is false.
	Limit uint32 `protobuf:"varint,6,opt,name=limit,proto3" json:"limit,omitempty"`
	// Every permit taken (held, or in its lock-delay), by increasing fencing token.
	Holders []*HolderInfo `protobuf:"bytes,7,rep,name=holders,proto3" json:"holders,omitempty"`
	// Callers waiting for the name, on every replica.
	Waiters uint32 `protobuf:"varint,8,opt,name=waiters,proto3" json:"waiters,omitempty"`
}

func (x *DescribeResponse) Reset() {
	*x = DescribeResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[12]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *DescribeResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*DescribeResponse) ProtoMessage() {}

func (x *DescribeResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[12]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use DescribeResponse.ProtoReflect.Descriptor instead.
func (*DescribeResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{12}
}

func (x *DescribeResponse) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *DescribeResponse) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *DescribeResponse) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *DescribeResponse) GetRemainingMs() int64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *DescribeResponse) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

func (x *DescribeResponse) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

func (x *DescribeResponse) GetHolders() []*HolderInfo {
	if x != nil {
		return x.Holders
	}
	return nil
}

func (x *DescribeResponse) GetWaiters() uint32 {
	if x != nil {
		return x.Waiters
	}
	return 0
}

// One holder of a lease (one permit of a counting lease), as anyone may see it: never its lease_id.
type HolderInfo struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The holder's `holder` string (may be empty).
	Holder string `protobuf:"bytes,1,opt,name=holder,proto3" json:"holder,omitempty"`
	// The fencing token of this grant.
	FencingToken uint64 `protobuf:"varint,2,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// Milliseconds until this permit frees unless renewed, lock-delay included; -1 if it has no
	// expiry.
	RemainingMs int64 `protobuf:"varint,3,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// When this grant expires unless renewed, on the store's clock (unset if it has no expiry).
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,4,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
	// True for a shared (read) grant (AcquireRequest.shared); false for an exclusive grant and for
	// the permits of a counting lease.
	Shared bool `protobuf:"varint,5,opt,name=shared,proto3" json:"shared,omitempty"`
}

func (x *HolderInfo) Reset() {
	*x = HolderInfo{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[13]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *HolderInfo) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*HolderInfo) ProtoMessage() {}

func (x *HolderInfo) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[13]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use HolderInfo.ProtoReflect.Descriptor instead.
func (*HolderInfo) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{13}
}

func (x *HolderInfo) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *HolderInfo) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *HolderInfo) GetRemainingMs() int64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *HolderInfo) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

func (x *HolderInfo) GetShared() bool {
	if x != nil {
		return x.Shared
	}
	return false
}

type WatchRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to watch. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
}

func (x *WatchRequest) Reset() {
	*x = WatchRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[14]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *WatchRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*WatchRequest) ProtoMessage() {}

func (x *WatchRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[14]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use WatchRequest.ProtoReflect.Descriptor instead.
func (*WatchRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{14}
}

func (x *WatchRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

// What happened to a watched lease. For an exclusive lease, `holder`, `fencing_token` and
// `expires_at` are those of the grant the event is about: the new holder for `GRANTED`, the one
// that ended for `RELEASED`, `EXPIRED` and `REVOKED`, the current holder for `SNAPSHOT` (zero
// when nobody holds it). For a counting lease they are those of the permit the event is about
// (for a `SNAPSHOT`, the holder with the smallest token), and `holders` lists every holder.
type WatchEvent struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The watched lease.
	Name  string           `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	Cause WatchEvent_Cause `protobuf:"varint,2,opt,name=cause,proto3,enum=lease.v1.WatchEvent_Cause" json:"cause,omitempty"`
	// True if someone holds the lease after this event.
	Held bool `protobuf:"varint,3,opt,name=held,proto3" json:"held,omitempty"`
	// The `holder` string of the grant this event is about (may be empty).
	Holder string `protobuf:"bytes,4,opt,name=holder,proto3" json:"holder,omitempty"`
	// The fencing token of the grant this event is about (0 in a snapshot of a free lease).
	FencingToken uint64 `protobuf:"varint,5,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// When that grant expires unless renewed, on the store's clock, as last known to the server
	// (renewals move it without an event); unset when nobody holds the lease.
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,6,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
	// The limit in force after this event (1 for an exclusive lease); 0 when nobody holds it.
	Limit uint32 `protobuf:"varint,7,opt,name=limit,proto3" json:"limit,omitempty"`
	// Every holder after this event, by increasing fencing token (`remaining_ms` as last known).
	Holders []*HolderInfo `protobuf:"bytes,8,rep,name=holders,proto3" json:"holders,omitempty"`
	// For `REVOKED`: the operator's reason.
	Reason string `protobuf:"bytes,9,opt,name=reason,proto3" json:"reason,omitempty"`
}

func (x *WatchEvent) Reset() {
	*x = WatchEvent{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[15]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *WatchEvent) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*WatchEvent) ProtoMessage() {}

func (x *WatchEvent) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[15]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use WatchEvent.ProtoReflect.Descriptor instead.
func (*WatchEvent) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{15}
}

func (x *WatchEvent) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *WatchEvent) GetCause() WatchEvent_Cause {
	if x != nil {
		return x.Cause
	}
	return WatchEvent_CAUSE_UNSPECIFIED
}

func (x *WatchEvent) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

func (x *WatchEvent) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *WatchEvent) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *WatchEvent) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

func (x *WatchEvent) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

func (x *WatchEvent) GetHolders() []*HolderInfo {
	if x != nil {
		return x.Holders
	}
	return nil
}

func (x *WatchEvent) GetReason() string {
	if x != nil {
		return x.Reason
	}
	return ""
}

type CheckTokenRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease whose token to check. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The token to check: the one the caller was given in `Granted`. Required, non-zero.
	FencingToken uint64 `protobuf:"varint,2,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
}

func (x *CheckTokenRequest) Reset() {
	*x = CheckTokenRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[16]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CheckTokenRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CheckTokenRequest) ProtoMessage() {}

func (x *CheckTokenRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[16]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CheckTokenRequest.ProtoReflect.Descriptor instead.
func (*CheckTokenRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{16}
}

func (x *CheckTokenRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *CheckTokenRequest) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

type CheckTokenResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// True only while the lease is held with exactly this token (for a counting lease: one of its
	// permits is). False once that grant was released, expired (its lock-delay counts as expired)
	// or revoked. Stale as soon as it is sent: see CheckToken.
	Current bool `protobuf:"varint,1,opt,name=current,proto3" json:"current,omitempty"`
	// The token of the grant that holds the lease now: `fencing_token` itself when `current`; for
	// a counting lease otherwise the largest token held; 0 when nobody holds it.
	CurrentToken uint64 `protobuf:"varint,2,opt,name=current_token,json=currentToken,proto3" json:"current_token,omitempty"`
	// True if anyone holds the lease now.
	Held bool `protobuf:"varint,3,opt,name=held,proto3" json:"held,omitempty"`
}

func (x *CheckTokenResponse) Reset() {
	*x = CheckTokenResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[17]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *CheckTokenResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CheckTokenResponse) ProtoMessage() {}

func (x *CheckTokenResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[17]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CheckTokenResponse.ProtoReflect.Descriptor instead.
func (*CheckTokenResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{17}
}

func (x *CheckTokenResponse) GetCurrent() bool {
	if x != nil {
		return x.Current
	}
	return false
}

func (x *CheckTokenResponse) GetCurrentToken() uint64 {
	if x != nil {
		return x.CurrentToken
	}
	return 0
}

func (x *CheckTokenResponse) GetHeld() bool {
	if x != nil {
		return x.Held
	}
	return false
}

type ListRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// List the leases whose names start with this: 0 to 256 bytes of the name alphabet
	// (`A-Z a-z 0-9 . _ - : / @`). Empty lists every lease.
	Prefix string `protobuf:"bytes,1,opt,name=prefix,proto3" json:"prefix,omitempty"`
	// At most this many leases per page: 0 means 100; more than 1000 is INVALID_ARGUMENT.
	PageSize uint32 `protobuf:"varint,2,opt,name=page_size,json=pageSize,proto3" json:"page_size,omitempty"`
	// `next_page_token` of the previous page, with the same `prefix`; empty for the first page.
	// Tokens are opaque; one that this server did not make is INVALID_ARGUMENT.
	PageToken string `protobuf:"bytes,3,opt,name=page_token,json=pageToken,proto3" json:"page_token,omitempty"`
}

func (x *ListRequest) Reset() {
	*x = ListRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[18]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ListRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ListRequest) ProtoMessage() {}

func (x *ListRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[18]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ListRequest.ProtoReflect.Descriptor instead.
func (*ListRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{18}
}

func (x *ListRequest) GetPrefix() string {
	if x != nil {
		return x.Prefix
	}
	return ""
}

func (x *ListRequest) GetPageSize() uint32 {
	if x != nil {
		return x.PageSize
	}
	return 0
}

func (x *ListRequest) GetPageToken() string {
	if x != nil {
		return x.PageToken
	}
	return ""
}

type ListResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The leases of this page, in no particular order.
	Leases []*LeaseInfo `protobuf:"bytes,1,rep,name=leases,proto3" json:"leases,omitempty"`
	// Pass it as `page_token` for the next page; empty when the listing is complete.
	NextPageToken string `protobuf:"bytes,2,opt,name=next_page_token,json=nextPageToken,proto3" json:"next_page_token,omitempty"`
}

func (x *ListResponse) Reset() {
	*x = ListResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[19]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *ListResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ListResponse) ProtoMessage() {}

func (x *ListResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[19]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ListResponse.ProtoReflect.Descriptor instead.
func (*ListResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{19}
}

func (x *ListResponse) GetLeases() []*LeaseInfo {
	if x != nil {
		return x.Leases
	}
	return nil
}

func (x *ListResponse) GetNextPageToken() string {
	if x != nil {
		return x.NextPageToken
	}
	return ""
}

// One held lease, as List shows it (never a lease_id). For a counting lease, fields 2 to 5
// describe the holder with the smallest token, and `holders` lists them all.
type LeaseInfo struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease name.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// The holder's `holder` string (may be empty).
	Holder string `protobuf:"bytes,2,opt,name=holder,proto3" json:"holder,omitempty"`
	// The holder's fencing token.
	FencingToken uint64 `protobuf:"varint,3,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
	// Milliseconds until the lease frees unless renewed, lock-delay included; -1 if it has no
	// expiry.
	RemainingMs int64 `protobuf:"varint,4,opt,name=remaining_ms,json=remainingMs,proto3" json:"remaining_ms,omitempty"`
	// When the lease expires unless renewed, on the store's clock (unset if it has no expiry).
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,5,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
	// Callers waiting for it, on every replica.
	Waiters uint32 `protobuf:"varint,6,opt,name=waiters,proto3" json:"waiters,omitempty"`
	// The limit in force: 1 for an exclusive lease, N for a counting lease.
	Limit uint32 `protobuf:"varint,7,opt,name=limit,proto3" json:"limit,omitempty"`
	// Every permit taken, by increasing fencing token.
	Holders []*HolderInfo `protobuf:"bytes,8,rep,name=holders,proto3" json:"holders,omitempty"`
}

func (x *LeaseInfo) Reset() {
	*x = LeaseInfo{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[20]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *LeaseInfo) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LeaseInfo) ProtoMessage() {}

func (x *LeaseInfo) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[20]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LeaseInfo.ProtoReflect.Descriptor instead.
func (*LeaseInfo) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{20}
}

func (x *LeaseInfo) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *LeaseInfo) GetHolder() string {
	if x != nil {
		return x.Holder
	}
	return ""
}

func (x *LeaseInfo) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

func (x *LeaseInfo) GetRemainingMs() int64 {
	if x != nil {
		return x.RemainingMs
	}
	return 0
}

func (x *LeaseInfo) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

func (x *LeaseInfo) GetWaiters() uint32 {
	if x != nil {
		return x.Waiters
	}
	return 0
}

func (x *LeaseInfo) GetLimit() uint32 {
	if x != nil {
		return x.Limit
	}
	return 0
}

func (x *LeaseInfo) GetHolders() []*HolderInfo {
	if x != nil {
		return x.Holders
	}
	return nil
}

type RevokeRequest struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// The lease to revoke. Required.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// Why, for the audit log and the revoked holder's `Lost.reason`: 1 to 256 bytes, without
	// control or bidirectional formatting characters (as AcquireRequest.holder). Required.
	Reason string `protobuf:"bytes,2,opt,name=reason,proto3" json:"reason,omitempty"`
	// Revoke only the grant with this fencing token (a permit, for a counting lease), and only if
	// it still holds the lease; 0 revokes whoever holds it.
	FencingToken uint64 `protobuf:"varint,3,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
}

func (x *RevokeRequest) Reset() {
	*x = RevokeRequest{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[21]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RevokeRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RevokeRequest) ProtoMessage() {}

func (x *RevokeRequest) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[21]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RevokeRequest.ProtoReflect.Descriptor instead.
func (*RevokeRequest) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{21}
}

func (x *RevokeRequest) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *RevokeRequest) GetReason() string {
	if x != nil {
		return x.Reason
	}
	return ""
}

func (x *RevokeRequest) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

type RevokeResponse struct {
	state         protoimpl.MessageState
	sizeCache     protoimpl.SizeCache
	unknownFields protoimpl.UnknownFields

	// True if this call ended a grant; false if nothing matched (the lease is free, or the grant
	// with `fencing_token` no longer holds it).
	Revoked bool `protobuf:"varint,1,opt,name=revoked,proto3" json:"revoked,omitempty"`
	// The token of the grant revoked (the largest, when every permit of a counting lease was).
	FencingToken uint64 `protobuf:"varint,2,opt,name=fencing_token,json=fencingToken,proto3" json:"fencing_token,omitempty"`
}

func (x *RevokeResponse) Reset() {
	*x = RevokeResponse{}
	if protoimpl.UnsafeEnabled {
		mi := &file_lease_v1_lease_proto_msgTypes[22]
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		ms.StoreMessageInfo(mi)
	}
}

func (x *RevokeResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*RevokeResponse) ProtoMessage() {}

func (x *RevokeResponse) ProtoReflect() protoreflect.Message {
	mi := &file_lease_v1_lease_proto_msgTypes[22]
	if protoimpl.UnsafeEnabled && x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use RevokeResponse.ProtoReflect.Descriptor instead.
func (*RevokeResponse) Descriptor() ([]byte, []int) {
	return file_lease_v1_lease_proto_rawDescGZIP(), []int{22}
}

func (x *RevokeResponse) GetRevoked() bool {
	if x != nil {
		return x.Revoked
	}
	return false
}

func (x *RevokeResponse) GetFencingToken() uint64 {
	if x != nil {
		return x.FencingToken
	}
	return 0
}

var File_lease_v1_lease_proto protoreflect.FileDescriptor

var file_lease_v1_lease_proto_rawDesc = []byte{
	0x0a, 0x14, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2f, 0x76, 0x31, 0x2f, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x12, 0x08, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31,
	0x1a, 0x1f, 0x67, 0x6f, 0x6f, 0x67, 0x6c, 0x65, 0x2f, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x62, 0x75,
	0x66, 0x2f, 0x74, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x2e, 0x70, 0x72, 0x6f, 0x74,
	0x6f, 0x22, 0xd9, 0x01, 0x0a, 0x0e, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x71,
	0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01,
	0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64,
	0x65, 0x72, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72,
	0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x03,
	0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x17, 0x0a, 0x07, 0x77, 0x61, 0x69, 0x74, 0x5f,
	0x6d, 0x73, 0x18, 0x04, 0x20, 0x01, 0x28, 0x03, 0x52, 0x06, 0x77, 0x61, 0x69, 0x74, 0x4d, 0x73,
	0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x18, 0x05, 0x20, 0x01, 0x28, 0x0d, 0x52,
	0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x12, 0x22, 0x0a, 0x0d, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x64,
	0x65, 0x6c, 0x61, 0x79, 0x5f, 0x6d, 0x73, 0x18, 0x06, 0x20, 0x01, 0x28, 0x03, 0x52, 0x0b, 0x6c,
	0x6f, 0x63, 0x6b, 0x44, 0x65, 0x6c, 0x61, 0x79, 0x4d, 0x73, 0x12, 0x16, 0x0a, 0x06, 0x73, 0x68,
	0x61, 0x72, 0x65, 0x64, 0x18, 0x07, 0x20, 0x01, 0x28, 0x08, 0x52, 0x06, 0x73, 0x68, 0x61, 0x72,
	0x65, 0x64, 0x12, 0x19, 0x0a, 0x08, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x5f, 0x69, 0x64, 0x18, 0x08,
	0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x64, 0x22, 0xb2, 0x01,
	0x0a, 0x0f, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73,
	0x65, 0x12, 0x2d, 0x0a, 0x07, 0x67, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x18, 0x01, 0x20, 0x01,
	0x28, 0x0b, 0x32, 0x11, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x47, 0x72,
	0x61, 0x6e, 0x74, 0x65, 0x64, 0x48, 0x00, 0x52, 0x07, 0x67, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64,
	0x12, 0x2d, 0x0a, 0x07, 0x77, 0x61, 0x69, 0x74, 0x69, 0x6e, 0x67, 0x18, 0x02, 0x20, 0x01, 0x28,
	0x0b, 0x32, 0x11, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x57, 0x61, 0x69,
	0x74, 0x69, 0x6e, 0x67, 0x48, 0x00, 0x52, 0x07, 0x77, 0x61, 0x69, 0x74, 0x69, 0x6e, 0x67, 0x12,
	0x37, 0x0a, 0x0b, 0x6e, 0x6f, 0x74, 0x5f, 0x67, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x18, 0x03,
	0x20, 0x01, 0x28, 0x0b, 0x32, 0x14, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e,
	0x4e, 0x6f, 0x74, 0x47, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x48, 0x00, 0x52, 0x0a, 0x6e, 0x6f,
	0x74, 0x47, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x42, 0x08, 0x0a, 0x06, 0x72, 0x65, 0x73, 0x75,
	0x6c, 0x74, 0x22, 0xaf, 0x01, 0x0a, 0x07, 0x47, 0x72, 0x61, 0x6e, 0x74, 0x65, 0x64, 0x12, 0x12,
	0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61,
	0x6d, 0x65, 0x12, 0x19, 0x0a, 0x08, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x5f, 0x69, 0x64, 0x18, 0x02,
	0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x64, 0x12, 0x23, 0x0a,
	0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x03,
	0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b,
	0x65, 0x6e, 0x12, 0x15, 0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01,
	0x28, 0x03, 0x52, 0x05, 0x74, 0x74, 0x6c, 0x4d, 0x73, 0x12, 0x39, 0x0a, 0x0a, 0x65, 0x78, 0x70,
	0x69, 0x72, 0x65, 0x73, 0x5f, 0x61, 0x74, 0x18, 0x05, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e,
	0x67, 0x6f, 0x6f, 0x67, 0x6c, 0x65, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x62, 0x75, 0x66, 0x2e,
	0x54, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x52, 0x09, 0x65, 0x78, 0x70, 0x69, 0x72,
	0x65, 0x73, 0x41, 0x74, 0x22, 0xaf, 0x01, 0x0a, 0x07, 0x57, 0x61, 0x69, 0x74, 0x69, 0x6e, 0x67,
	0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09,
	0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63,
	0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52,
	0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x21, 0x0a,
	0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20,
	0x01, 0x28, 0x03, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73,
	0x12, 0x1a, 0x0a, 0x08, 0x70, 0x6f, 0x73, 0x69, 0x74, 0x69, 0x6f, 0x6e, 0x18, 0x04, 0x20, 0x01,
	0x28, 0x0d, 0x52, 0x08, 0x70, 0x6f, 0x73, 0x69, 0x74, 0x69, 0x6f, 0x6e, 0x12, 0x12, 0x0a, 0x04,
	0x68, 0x65, 0x6c, 0x64, 0x18, 0x05, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x04, 0x68, 0x65, 0x6c, 0x64,
	0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0d, 0x52,
	0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x22, 0x96, 0x01, 0x0a, 0x0a, 0x4e, 0x6f, 0x74, 0x47, 0x72,
	0x61, 0x6e, 0x74, 0x65, 0x64, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18,
	0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x23, 0x0a,
	0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02,
	0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b,
	0x65, 0x6e, 0x12, 0x21, 0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f,
	0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x03, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e,
	0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12, 0x12, 0x0a, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x18, 0x05, 0x20,
	0x01, 0x28, 0x0d, 0x52, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d,
	0x69, 0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x22,
	0x54, 0x0a, 0x0c, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12,
	0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e,
	0x61, 0x6d, 0x65, 0x12, 0x19, 0x0a, 0x08, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x5f, 0x69, 0x64, 0x18,
	0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x64, 0x12, 0x15,
	0x0a, 0x06, 0x74, 0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x03, 0x52, 0x05,
	0x74, 0x74, 0x6c, 0x4d, 0x73, 0x22, 0x82, 0x01, 0x0a, 0x0d, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x52,
	0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18,
	0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x2d, 0x0a, 0x07, 0x72,
	0x65, 0x6e, 0x65, 0x77, 0x65, 0x64, 0x18, 0x02, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x11, 0x2e, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x65, 0x64, 0x48,
	0x00, 0x52, 0x07, 0x72, 0x65, 0x6e, 0x65, 0x77, 0x65, 0x64, 0x12, 0x24, 0x0a, 0x04, 0x6c, 0x6f,
	0x73, 0x74, 0x18, 0x03, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x0e, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x6f, 0x73, 0x74, 0x48, 0x00, 0x52, 0x04, 0x6c, 0x6f, 0x73, 0x74,
	0x42, 0x08, 0x0a, 0x06, 0x72, 0x65, 0x73, 0x75, 0x6c, 0x74, 0x22, 0x80, 0x01, 0x0a, 0x07, 0x52,
	0x65, 0x6e, 0x65, 0x77, 0x65, 0x64, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e,
	0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x01, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66,
	0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x15, 0x0a, 0x06, 0x74,
	0x74, 0x6c, 0x5f, 0x6d, 0x73, 0x18, 0x02, 0x20, 0x01, 0x28, 0x03, 0x52, 0x05, 0x74, 0x74, 0x6c,
	0x4d, 0x73, 0x12, 0x39, 0x0a, 0x0a, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x5f, 0x61, 0x74,
	0x18, 0x03, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e, 0x67, 0x6f, 0x6f, 0x67, 0x6c, 0x65, 0x2e,
	0x70, 0x72, 0x6f, 0x74, 0x6f, 0x62, 0x75, 0x66, 0x2e, 0x54, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61,
	0x6d, 0x70, 0x52, 0x09, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x41, 0x74, 0x22, 0x1e, 0x0a,
	0x04, 0x4c, 0x6f, 0x73, 0x74, 0x12, 0x16, 0x0a, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x18,
	0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x22, 0x3f, 0x0a,
	0x0e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12,
	0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e,
	0x61, 0x6d, 0x65, 0x12, 0x19, 0x0a, 0x08, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x5f, 0x69, 0x64, 0x18,
	0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x07, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x64, 0x22, 0x2d,
	0x0a, 0x0f, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73,
	0x65, 0x12, 0x1a, 0x0a, 0x08, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x64, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x08, 0x52, 0x08, 0x72, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x64, 0x22, 0x25, 0x0a,
	0x0f, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74,
	0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04,
	0x6e, 0x61, 0x6d, 0x65, 0x22, 0xa1, 0x02, 0x0a, 0x10, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62,
	0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x68, 0x65, 0x6c,
	0x64, 0x18, 0x01, 0x20, 0x01, 0x28, 0x08, 0x52, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x12, 0x16, 0x0a,
	0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68,
	0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67,
	0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66, 0x65,
	0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x21, 0x0a, 0x0c, 0x72, 0x65,
	0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01, 0x28, 0x03,
	0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12, 0x39, 0x0a,
	0x0a, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x5f, 0x61, 0x74, 0x18, 0x05, 0x20, 0x01, 0x28,
	0x0b, 0x32, 0x1a, 0x2e, 0x67, 0x6f, 0x6f, 0x67, 0x6c, 0x65, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f,
	0x62, 0x75, 0x66, 0x2e, 0x54, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x52, 0x09, 0x65,
	0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x41, 0x74, 0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d, 0x69,
	0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x12, 0x2e,
	0x0a, 0x07, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x73, 0x18, 0x07, 0x20, 0x03, 0x28, 0x0b, 0x32,
	0x14, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x48, 0x6f, 0x6c, 0x64, 0x65,
	0x72, 0x49, 0x6e, 0x66, 0x6f, 0x52, 0x07, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x73, 0x12, 0x18,
	0x0a, 0x07, 0x77, 0x61, 0x69, 0x74, 0x65, 0x72, 0x73, 0x18, 0x08, 0x20, 0x01, 0x28, 0x0d, 0x52,
	0x07, 0x77, 0x61, 0x69, 0x74, 0x65, 0x72, 0x73, 0x22, 0xbf, 0x01, 0x0a, 0x0a, 0x48, 0x6f, 0x6c,
	0x64, 0x65, 0x72, 0x49, 0x6e, 0x66, 0x6f, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65,
	0x72, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12,
	0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e,
	0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54,
	0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x21, 0x0a, 0x0c, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e,
	0x67, 0x5f, 0x6d, 0x73, 0x18, 0x03, 0x20, 0x01, 0x28, 0x03, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61,
	0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12, 0x39, 0x0a, 0x0a, 0x65, 0x78, 0x70, 0x69, 0x72,
	0x65, 0x73, 0x5f, 0x61, 0x74, 0x18, 0x04, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e, 0x67, 0x6f,
	0x6f, 0x67, 0x6c, 0x65, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x62, 0x75, 0x66, 0x2e, 0x54, 0x69,
	0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x52, 0x09, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73,
	0x41, 0x74, 0x12, 0x16, 0x0a, 0x06, 0x73, 0x68, 0x61, 0x72, 0x65, 0x64, 0x18, 0x05, 0x20, 0x01,
	0x28, 0x08, 0x52, 0x06, 0x73, 0x68, 0x61, 0x72, 0x65, 0x64, 0x22, 0x22, 0x0a, 0x0c, 0x57, 0x61,
	0x74, 0x63, 0x68, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61,
	0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0xbd,
	0x03, 0x0a, 0x0a, 0x57, 0x61, 0x74, 0x63, 0x68, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x12, 0x12, 0x0a,
	0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d,
	0x65, 0x12, 0x30, 0x0a, 0x05, 0x63, 0x61, 0x75, 0x73, 0x65, 0x18, 0x02, 0x20, 0x01, 0x28, 0x0e,
	0x32, 0x1a, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x57, 0x61, 0x74, 0x63,
	0x68, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x2e, 0x43, 0x61, 0x75, 0x73, 0x65, 0x52, 0x05, 0x63, 0x61,
	0x75, 0x73, 0x65, 0x12, 0x12, 0x0a, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x18, 0x03, 0x20, 0x01, 0x28,
	0x08, 0x52, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x12, 0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65,
	0x72, 0x18, 0x04, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12,
	0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e,
	0x18, 0x05, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54,
	0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x39, 0x0a, 0x0a, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x5f,
	0x61, 0x74, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e, 0x67, 0x6f, 0x6f, 0x67, 0x6c,
	0x65, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x62, 0x75, 0x66, 0x2e, 0x54, 0x69, 0x6d, 0x65, 0x73,
	0x74, 0x61, 0x6d, 0x70, 0x52, 0x09, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x41, 0x74, 0x12,
	0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x18, 0x07, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x05,
	0x6c, 0x69, 0x6d, 0x69, 0x74, 0x12, 0x2e, 0x0a, 0x07, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x73,
	0x18, 0x08, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x14, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76,
	0x31, 0x2e, 0x48, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x49, 0x6e, 0x66, 0x6f, 0x52, 0x07, 0x68, 0x6f,
	0x6c, 0x64, 0x65, 0x72, 0x73, 0x12, 0x16, 0x0a, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x18,
	0x09, 0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x22, 0x7f, 0x0a,
	0x05, 0x43, 0x61, 0x75, 0x73, 0x65, 0x12, 0x15, 0x0a, 0x11, 0x43, 0x41, 0x55, 0x53, 0x45, 0x5f,
	0x55, 0x4e, 0x53, 0x50, 0x45, 0x43, 0x49, 0x46, 0x49, 0x45, 0x44, 0x10, 0x00, 0x12, 0x12, 0x0a,
	0x0e, 0x43, 0x41, 0x55, 0x53, 0x45, 0x5f, 0x53, 0x4e, 0x41, 0x50, 0x53, 0x48, 0x4f, 0x54, 0x10,
	0x01, 0x12, 0x11, 0x0a, 0x0d, 0x43, 0x41, 0x55, 0x53, 0x45, 0x5f, 0x47, 0x52, 0x41, 0x4e, 0x54,
	0x45, 0x44, 0x10, 0x02, 0x12, 0x12, 0x0a, 0x0e, 0x43, 0x41, 0x55, 0x53, 0x45, 0x5f, 0x52, 0x45,
	0x4c, 0x45, 0x41, 0x53, 0x45, 0x44, 0x10, 0x03, 0x12, 0x11, 0x0a, 0x0d, 0x43, 0x41, 0x55, 0x53,
	0x45, 0x5f, 0x45, 0x58, 0x50, 0x49, 0x52, 0x45, 0x44, 0x10, 0x04, 0x12, 0x11, 0x0a, 0x0d, 0x43,
	0x41, 0x55, 0x53, 0x45, 0x5f, 0x52, 0x45, 0x56, 0x4f, 0x4b, 0x45, 0x44, 0x10, 0x05, 0x22, 0x4c,
	0x0a, 0x11, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28,
	0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69,
	0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c,
	0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x67, 0x0a, 0x12,
	0x43, 0x68, 0x65, 0x63, 0x6b, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e,
	0x73, 0x65, 0x12, 0x18, 0x0a, 0x07, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x18, 0x01, 0x20,
	0x01, 0x28, 0x08, 0x52, 0x07, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x12, 0x23, 0x0a, 0x0d,
	0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20,
	0x01, 0x28, 0x04, 0x52, 0x0c, 0x63, 0x75, 0x72, 0x72, 0x65, 0x6e, 0x74, 0x54, 0x6f, 0x6b, 0x65,
	0x6e, 0x12, 0x12, 0x0a, 0x04, 0x68, 0x65, 0x6c, 0x64, 0x18, 0x03, 0x20, 0x01, 0x28, 0x08, 0x52,
	0x04, 0x68, 0x65, 0x6c, 0x64, 0x22, 0x61, 0x0a, 0x0b, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x71,
	0x75, 0x65, 0x73, 0x74, 0x12, 0x16, 0x0a, 0x06, 0x70, 0x72, 0x65, 0x66, 0x69, 0x78, 0x18, 0x01,
	0x20, 0x01, 0x28, 0x09, 0x52, 0x06, 0x70, 0x72, 0x65, 0x66, 0x69, 0x78, 0x12, 0x1b, 0x0a, 0x09,
	0x70, 0x61, 0x67, 0x65, 0x5f, 0x73, 0x69, 0x7a, 0x65, 0x18, 0x02, 0x20, 0x01, 0x28, 0x0d, 0x52,
	0x08, 0x70, 0x61, 0x67, 0x65, 0x53, 0x69, 0x7a, 0x65, 0x12, 0x1d, 0x0a, 0x0a, 0x70, 0x61, 0x67,
	0x65, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x03, 0x20, 0x01, 0x28, 0x09, 0x52, 0x09, 0x70,
	0x61, 0x67, 0x65, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x63, 0x0a, 0x0c, 0x4c, 0x69, 0x73, 0x74,
	0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x2b, 0x0a, 0x06, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x73, 0x18, 0x01, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x13, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x6e, 0x66, 0x6f, 0x52, 0x06, 0x6c,
	0x65, 0x61, 0x73, 0x65, 0x73, 0x12, 0x26, 0x0a, 0x0f, 0x6e, 0x65, 0x78, 0x74, 0x5f, 0x70, 0x61,
	0x67, 0x65, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52, 0x0d,
	0x6e, 0x65, 0x78, 0x74, 0x50, 0x61, 0x67, 0x65, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x9a, 0x02,
	0x0a, 0x09, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x49, 0x6e, 0x66, 0x6f, 0x12, 0x12, 0x0a, 0x04, 0x6e,
	0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12,
	0x16, 0x0a, 0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52,
	0x06, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69,
	0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c,
	0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x21, 0x0a, 0x0c,
	0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x5f, 0x6d, 0x73, 0x18, 0x04, 0x20, 0x01,
	0x28, 0x03, 0x52, 0x0b, 0x72, 0x65, 0x6d, 0x61, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x4d, 0x73, 0x12,
	0x39, 0x0a, 0x0a, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x5f, 0x61, 0x74, 0x18, 0x05, 0x20,
	0x01, 0x28, 0x0b, 0x32, 0x1a, 0x2e, 0x67, 0x6f, 0x6f, 0x67, 0x6c, 0x65, 0x2e, 0x70, 0x72, 0x6f,
	0x74, 0x6f, 0x62, 0x75, 0x66, 0x2e, 0x54, 0x69, 0x6d, 0x65, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x52,
	0x09, 0x65, 0x78, 0x70, 0x69, 0x72, 0x65, 0x73, 0x41, 0x74, 0x12, 0x18, 0x0a, 0x07, 0x77, 0x61,
	0x69, 0x74, 0x65, 0x72, 0x73, 0x18, 0x06, 0x20, 0x01, 0x28, 0x0d, 0x52, 0x07, 0x77, 0x61, 0x69,
	0x74, 0x65, 0x72, 0x73, 0x12, 0x14, 0x0a, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x18, 0x07, 0x20,
	0x01, 0x28, 0x0d, 0x52, 0x05, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x12, 0x2e, 0x0a, 0x07, 0x68, 0x6f,
	0x6c, 0x64, 0x65, 0x72, 0x73, 0x18, 0x08, 0x20, 0x03, 0x28, 0x0b, 0x32, 0x14, 0x2e, 0x6c, 0x65,
	0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x48, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x49, 0x6e, 0x66,
	0x6f, 0x52, 0x07, 0x68, 0x6f, 0x6c, 0x64, 0x65, 0x72, 0x73, 0x22, 0x60, 0x0a, 0x0d, 0x52, 0x65,
	0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x12, 0x12, 0x0a, 0x04, 0x6e,
	0x61, 0x6d, 0x65, 0x18, 0x01, 0x20, 0x01, 0x28, 0x09, 0x52, 0x04, 0x6e, 0x61, 0x6d, 0x65, 0x12,
	0x16, 0x0a, 0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x09, 0x52,
	0x06, 0x72, 0x65, 0x61, 0x73, 0x6f, 0x6e, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63, 0x69,
	0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x03, 0x20, 0x01, 0x28, 0x04, 0x52, 0x0c,
	0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x22, 0x4f, 0x0a, 0x0e,
	0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x18,
	0x0a, 0x07, 0x72, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x64, 0x18, 0x01, 0x20, 0x01, 0x28, 0x08, 0x52,
	0x07, 0x72, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x64, 0x12, 0x23, 0x0a, 0x0d, 0x66, 0x65, 0x6e, 0x63,
	0x69, 0x6e, 0x67, 0x5f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x18, 0x02, 0x20, 0x01, 0x28, 0x04, 0x52,
	0x0c, 0x66, 0x65, 0x6e, 0x63, 0x69, 0x6e, 0x67, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x32, 0x93, 0x03,
	0x0a, 0x0c, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x53, 0x65, 0x72, 0x76, 0x69, 0x63, 0x65, 0x12, 0x40,
	0x0a, 0x07, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x12, 0x18, 0x2e, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x2e, 0x76, 0x31, 0x2e, 0x41, 0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x1a, 0x19, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x41,
	0x63, 0x71, 0x75, 0x69, 0x72, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x30, 0x01,
	0x12, 0x3c, 0x0a, 0x05, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x12, 0x16, 0x2e, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e, 0x65, 0x77, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73,
	0x74, 0x1a, 0x17, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6e,
	0x65, 0x77, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x28, 0x01, 0x30, 0x01, 0x12, 0x3e,
	0x0a, 0x07, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x12, 0x18, 0x2e, 0x6c, 0x65, 0x61, 0x73,
	0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x1a, 0x19, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52,
	0x65, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x12, 0x41,
	0x0a, 0x08, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x12, 0x19, 0x2e, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65,
	0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1a, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31,
	0x2e, 0x44, 0x65, 0x73, 0x63, 0x72, 0x69, 0x62, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73,
	0x65, 0x12, 0x37, 0x0a, 0x05, 0x57, 0x61, 0x74, 0x63, 0x68, 0x12, 0x16, 0x2e, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x57, 0x61, 0x74, 0x63, 0x68, 0x52, 0x65, 0x71, 0x75, 0x65,
	0x73, 0x74, 0x1a, 0x14, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x57, 0x61,
	0x74, 0x63, 0x68, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x30, 0x01, 0x12, 0x47, 0x0a, 0x0a, 0x43, 0x68,
	0x65, 0x63, 0x6b, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x12, 0x1b, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x2e, 0x76, 0x31, 0x2e, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x52, 0x65,
	0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x1c, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31,
	0x2e, 0x43, 0x68, 0x65, 0x63, 0x6b, 0x54, 0x6f, 0x6b, 0x65, 0x6e, 0x52, 0x65, 0x73, 0x70, 0x6f,
	0x6e, 0x73, 0x65, 0x32, 0x87, 0x01, 0x0a, 0x11, 0x4c, 0x65, 0x61, 0x73, 0x65, 0x41, 0x64, 0x6d,
	0x69, 0x6e, 0x53, 0x65, 0x72, 0x76, 0x69, 0x63, 0x65, 0x12, 0x35, 0x0a, 0x04, 0x4c, 0x69, 0x73,
	0x74, 0x12, 0x15, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x69, 0x73,
	0x74, 0x52, 0x65, 0x71, 0x75, 0x65, 0x73, 0x74, 0x1a, 0x16, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65,
	0x2e, 0x76, 0x31, 0x2e, 0x4c, 0x69, 0x73, 0x74, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65,
	0x12, 0x3b, 0x0a, 0x06, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x12, 0x17, 0x2e, 0x6c, 0x65, 0x61,
	0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52, 0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x71, 0x75,
	0x65, 0x73, 0x74, 0x1a, 0x18, 0x2e, 0x6c, 0x65, 0x61, 0x73, 0x65, 0x2e, 0x76, 0x31, 0x2e, 0x52,
	0x65, 0x76, 0x6f, 0x6b, 0x65, 0x52, 0x65, 0x73, 0x70, 0x6f, 0x6e, 0x73, 0x65, 0x62, 0x06, 0x70,
	0x72, 0x6f, 0x74, 0x6f, 0x33,
}

var (
	file_lease_v1_lease_proto_rawDescOnce sync.Once
	file_lease_v1_lease_proto_rawDescData = file_lease_v1_lease_proto_rawDesc
)

func file_lease_v1_lease_proto_rawDescGZIP() []byte {
	file_lease_v1_lease_proto_rawDescOnce.Do(func() {
		file_lease_v1_lease_proto_rawDescData = protoimpl.X.CompressGZIP(file_lease_v1_lease_proto_rawDescData)
	})
	return file_lease_v1_lease_proto_rawDescData
}

var file_lease_v1_lease_proto_enumTypes = make([]protoimpl.EnumInfo, 1)
var file_lease_v1_lease_proto_msgTypes = make([]protoimpl.MessageInfo, 23)
var file_lease_v1_lease_proto_goTypes = []interface{}{
	(WatchEvent_Cause)(0),         // 0: lease.v1.WatchEvent.Cause
	(*AcquireRequest)(nil),        // 1: lease.v1.AcquireRequest
	(*AcquireResponse)(nil),       // 2: lease.v1.AcquireResponse
	(*Granted)(nil),               // 3: lease.v1.Granted
	(*Waiting)(nil),               // 4: lease.v1.Waiting
	(*NotGranted)(nil),            // 5: lease.v1.NotGranted
	(*RenewRequest)(nil),          // 6: lease.v1.RenewRequest
	(*RenewResponse)(nil),         // 7: lease.v1.RenewResponse
	(*Renewed)(nil),               // 8: lease.v1.Renewed
	(*Lost)(nil),                  // 9: lease.v1.Lost
	(*ReleaseRequest)(nil),        // 10: lease.v1.ReleaseRequest
	(*ReleaseResponse)(nil),       // 11: lease.v1.ReleaseResponse
	(*DescribeRequest)(nil),       // 12: lease.v1.DescribeRequest
	(*DescribeResponse)(nil),      // 13: lease.v1.DescribeResponse
	(*HolderInfo)(nil),            // 14: lease.v1.HolderInfo
	(*WatchRequest)(nil),          // 15: lease.v1.WatchRequest
	(*WatchEvent)(nil),            // 16: lease.v1.WatchEvent
	(*CheckTokenRequest)(nil),     // 17: lease.v1.CheckTokenRequest
	(*CheckTokenResponse)(nil),    // 18: lease.v1.CheckTokenResponse
	(*ListRequest)(nil),           // 19: lease.v1.ListRequest
	(*ListResponse)(nil),          // 20: lease.v1.ListResponse
	(*LeaseInfo)(nil),             // 21: lease.v1.LeaseInfo
	(*RevokeRequest)(nil),         // 22: lease.v1.RevokeRequest
	(*RevokeResponse)(nil),        // 23: lease.v1.RevokeResponse
	(*timestamppb.Timestamp)(nil), // 24: google.protobuf.Timestamp
}
var file_lease_v1_lease_proto_depIdxs = []int32{
	3,  // 0: lease.v1.AcquireResponse.granted:type_name -> lease.v1.Granted
	4,  // 1: lease.v1.AcquireResponse.waiting:type_name -> lease.v1.Waiting
	5,  // 2: lease.v1.AcquireResponse.not_granted:type_name -> lease.v1.NotGranted
	24, // 3: lease.v1.Granted.expires_at:type_name -> google.protobuf.Timestamp
	8,  // 4: lease.v1.RenewResponse.renewed:type_name -> lease.v1.Renewed
	9,  // 5: lease.v1.RenewResponse.lost:type_name -> lease.v1.Lost
	24, // 6: lease.v1.Renewed.expires_at:type_name -> google.protobuf.Timestamp
	24, // 7: lease.v1.DescribeResponse.expires_at:type_name -> google.protobuf.Timestamp
	14, // 8: lease.v1.DescribeResponse.holders:type_name -> lease.v1.HolderInfo
	24, // 9: lease.v1.HolderInfo.expires_at:type_name -> google.protobuf.Timestamp
	0,  // 10: lease.v1.WatchEvent.cause:type_name -> lease.v1.WatchEvent.Cause
	24, // 11: lease.v1.WatchEvent.expires_at:type_name -> google.protobuf.Timestamp
	14, // 12: lease.v1.WatchEvent.holders:type_name -> lease.v1.HolderInfo
	21, // 13: lease.v1.ListResponse.leases:type_name -> lease.v1.LeaseInfo
	24, // 14: lease.v1.LeaseInfo.expires_at:type_name -> google.protobuf.Timestamp
	14, // 15: lease.v1.LeaseInfo.holders:type_name -> lease.v1.HolderInfo
	1,  // 16: lease.v1.LeaseService.Acquire:input_type -> lease.v1.AcquireRequest
	6,  // 17: lease.v1.LeaseService.Renew:input_type -> lease.v1.RenewRequest
	10, // 18: lease.v1.LeaseService.Release:input_type -> lease.v1.ReleaseRequest
	12, // 19: lease.v1.LeaseService.Describe:input_type -> lease.v1.DescribeRequest
	15, // 20: lease.v1.LeaseService.Watch:input_type -> lease.v1.WatchRequest
	17, // 21: lease.v1.LeaseService.CheckToken:input_type -> lease.v1.CheckTokenRequest
	19, // 22: lease.v1.LeaseAdminService.List:input_type -> lease.v1.ListRequest
	22, // 23: lease.v1.LeaseAdminService.Revoke:input_type -> lease.v1.RevokeRequest
	2,  // 24: lease.v1.LeaseService.Acquire:output_type -> lease.v1.AcquireResponse
	7,  // 25: lease.v1.LeaseService.Renew:output_type -> lease.v1.RenewResponse
	11, // 26: lease.v1.LeaseService.Release:output_type -> lease.v1.ReleaseResponse
	13, // 27: lease.v1.LeaseService.Describe:output_type -> lease.v1.DescribeResponse
	16, // 28: lease.v1.LeaseService.Watch:output_type -> lease.v1.WatchEvent
	18, // 29: lease.v1.LeaseService.CheckToken:output_type -> lease.v1.CheckTokenResponse
	20, // 30: lease.v1.LeaseAdminService.List:output_type -> lease.v1.ListResponse
	23, // 31: lease.v1.LeaseAdminService.Revoke:output_type -> lease.v1.RevokeResponse
	24, // [24:32] is the sub-list for method output_type
	16, // [16:24] is the sub-list for method input_type
	16, // [16:16] is the sub-list for extension type_name
	16, // [16:16] is the sub-list for extension extendee
	0,  // [0:16] is the sub-list for field type_name
}

func init() { file_lease_v1_lease_proto_init() }
func file_lease_v1_lease_proto_init() {
	if File_lease_v1_lease_proto != nil {
		return
	}
	if !protoimpl.UnsafeEnabled {
		file_lease_v1_lease_proto_msgTypes[0].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*AcquireRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[1].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*AcquireResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[2].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*Granted); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[3].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*Waiting); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[4].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*NotGranted); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[5].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RenewRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[6].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RenewResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[7].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*Renewed); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[8].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*Lost); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[9].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ReleaseRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[10].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ReleaseResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[11].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*DescribeRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[12].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*DescribeResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[13].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*HolderInfo); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[14].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*WatchRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[15].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*WatchEvent); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[16].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CheckTokenRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[17].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*CheckTokenResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[18].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ListRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[19].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*ListResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[20].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*LeaseInfo); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[21].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RevokeRequest); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
		file_lease_v1_lease_proto_msgTypes[22].Exporter = func(v interface{}, i int) interface{} {
			switch v := v.(*RevokeResponse); i {
			case 0:
				return &v.state
			case 1:
				return &v.sizeCache
			case 2:
				return &v.unknownFields
			default:
				return nil
			}
		}
	}
	file_lease_v1_lease_proto_msgTypes[1].OneofWrappers = []interface{}{
		(*AcquireResponse_Granted)(nil),
		(*AcquireResponse_Waiting)(nil),
		(*AcquireResponse_NotGranted)(nil),
	}
	file_lease_v1_lease_proto_msgTypes[6].OneofWrappers = []interface{}{
		(*RenewResponse_Renewed)(nil),
		(*RenewResponse_Lost)(nil),
	}
	type x struct{}
	out := protoimpl.TypeBuilder{
		File: protoimpl.DescBuilder{
			GoPackagePath: reflect.TypeOf(x{}).PkgPath(),
			RawDescriptor: file_lease_v1_lease_proto_rawDesc,
			NumEnums:      1,
			NumMessages:   23,
			NumExtensions: 0,
			NumServices:   2,
		},
		GoTypes:           file_lease_v1_lease_proto_goTypes,
		DependencyIndexes: file_lease_v1_lease_proto_depIdxs,
		EnumInfos:         file_lease_v1_lease_proto_enumTypes,
		MessageInfos:      file_lease_v1_lease_proto_msgTypes,
	}.Build()
	File_lease_v1_lease_proto = out.File
	file_lease_v1_lease_proto_rawDesc = nil
	file_lease_v1_lease_proto_goTypes = nil
	file_lease_v1_lease_proto_depIdxs = nil
}
