package parsetier

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// wireTrailer is the trailing metadata key of a failed Parse stream's or ParseOnce call's error
// in the session's wire dialect (docs/service.md, "Errors in the dialect").
const wireTrailer = "parsetier-wire-bin"

// wireError is a session's status with the error bytes of its wire dialect.
type wireError struct {
	error
	wire []byte
}

func (e *wireError) Unwrap() error { return e.error }

// GRPCStatus keeps status.Code and status.FromError seeing the server's status.
func (e *wireError) GRPCStatus() *status.Status {
	s, _ := status.FromError(e.error)
	return s
}

// withWire attaches the wire bytes a failed stream's trailer carries to its error.
func withWire(err error, trailer metadata.MD) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	if values := trailer.Get(wireTrailer); len(values) > 0 && values[0] != "" {
		return &wireError{error: err, wire: []byte(values[0])}
	}
	return err
}

// WireError is the error, in the session's wire dialect, of a session opened WithWire that
// ended with err (from Open, Recv, Messages or Wire): the bytes to forward to the caller as the
// response's last, an error event for a stream or the API's error body otherwise (send a body
// with the HTTP status docs/service.md gives for the code). Nil when there is none: the session
// asked for no wire bytes or named no dialect, or was cancelled or handed off.
func WireError(err error) []byte {
	var w *wireError
	if errors.As(err, &w) {
		return w.wire
	}
	return nil
}

// HTTPStatus is the HTTP status to send a non-streamed error body (WireError) with, for the
// status err carries: the one the SDKs map to their error classes (docs/service.md, "Errors in
// the dialect"); 500 for any other code.
func HTTPStatus(err error) int {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.Unauthenticated:
		return 401
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.ResourceExhausted:
		return 429
	case codes.DeadlineExceeded:
		return 504
	case codes.Unavailable:
		return 503
	}
	return 500
}

// WireJoin joins the wire bytes of n sessions, the choices 0 .. n-1 of one OpenAI chat or
// completions request (n > 1), into the one response its caller reads; with n = 1, any dialect's
// bytes pass through unchanged, so one code path serves every request. Feed each session's
// replies as they come (AddResponse, AddOutput) and forward what they return.
//
// Streamed: a choice's events are held until every choice before it has sent its first (the
// openai SDK's accumulator appends a choice index it has not seen, so an index that comes early
// breaks it); every choice's Final.wire is held and only the last to finish has its own go out,
// once all have finished (send that choice's Finish with OtherChoicesUsage, the others' usage
// summed, and its usage chunk counts every choice). A body (stream false): each choice's
// Final.wire is a whole body; once all have one, the joined body has every choice in index
// order and the usage of the last to finish. A choice that ends with a status ends the
// response: its error bytes go out at once, held events are dropped, and nothing more comes.
// Not safe for concurrent use.
type WireJoin struct {
	n, started, last int
	stream, ended    bool
	held             [][][]byte
	finals           map[int][]byte
}

// NewWireJoin joins n choices, streamed or as bodies.
func NewWireJoin(n int, stream bool) *WireJoin {
	return &WireJoin{n: n, stream: stream, last: -1, held: make([][][]byte, n), finals: map[int][]byte{}}
}

// Ended reports that the response is complete (every choice finished) or failed.
func (j *WireJoin) Ended() bool { return j.ended }

// AddResponse takes one reply of choice's Parse stream and returns the bytes to forward now.
func (j *WireJoin) AddResponse(choice int, reply *pb.ParseResponse) ([]byte, error) {
	return j.add(choice, reply.GetWire(), reply.GetFinal(), nil)
}

// AddOutput takes one ParseBatch output of choice's session and returns the bytes to forward now.
func (j *WireJoin) AddOutput(choice int, output *pb.SessionOutput) ([]byte, error) {
	var failed []byte
	if output.GetStatus() != nil {
		failed = output.GetStatus().GetWire()
	}
	return j.add(choice, output.GetWire(), output.GetFinal(), failed)
}

// Fail takes the error choice's Parse stream ended with and returns the bytes that end the
// response (WireError's).
func (j *WireJoin) Fail(err error) []byte {
	if j.ended {
		return nil
	}
	j.ended = true
	return WireError(err)
}

func (j *WireJoin) add(choice int, wire []byte, final *pb.Final, failed []byte) ([]byte, error) {
	if choice < 0 || choice >= j.n {
		return nil, fmt.Errorf("parsetier: choice %d is not in 0..%d", choice, j.n-1)
	}
	if j.ended {
		return nil, nil
	}
	if len(wire) > 0 {
		j.held[choice] = append(j.held[choice], wire)
	}
	if final != nil {
		if _, twice := j.finals[choice]; twice {
			return nil, fmt.Errorf("parsetier: choice %d finished twice", choice)
		}
		j.finals[choice] = final.GetWire()
		j.last = choice
	}
	var out []byte
	if j.stream {
		out = j.release()
	}
	if len(failed) > 0 {
		j.ended = true
		return append(out, failed...), nil
	}
	if len(j.finals) == j.n {
		j.ended = true
		if !j.stream {
			body, err := j.joinedBody()
			return append(out, body...), err
		}
		out = append(out, j.finals[j.last]...)
	}
	return out, nil
}

// release is the held events that may go out: those of every choice whose predecessors started.
func (j *WireJoin) release() []byte {
	var out []byte
	for j.started < j.n && len(j.held[j.started]) > 0 {
		for _, b := range j.held[j.started] {
			out = append(out, b...)
		}
		j.held[j.started] = nil
		j.started++
	}
	for choice := range j.started {
		for _, b := range j.held[choice] {
			out = append(out, b...)
		}
		j.held[choice] = nil
	}
	return out
}

func (j *WireJoin) joinedBody() ([]byte, error) {
	if j.n == 1 {
		return j.finals[0], nil // one choice's body is the response's, in any dialect
	}
	var joined map[string]json.RawMessage
	type indexed struct {
		index int
		raw   json.RawMessage
	}
	var choices []indexed
	for i := range j.n {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(j.finals[i], &body); err != nil {
			return nil, fmt.Errorf("parsetier: choice %d's body: %w", i, err)
		}
		var list []json.RawMessage
		if err := json.Unmarshal(body["choices"], &list); err != nil {
			return nil, fmt.Errorf("parsetier: choice %d's choices: %w", i, err)
		}
		for _, raw := range list {
			var c struct {
				Index int `json:"index"`
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, fmt.Errorf("parsetier: choice %d's choices: %w", i, err)
			}
			choices = append(choices, indexed{c.Index, raw})
		}
		if i == j.last {
			joined = body
		}
	}
	sort.SliceStable(choices, func(a, b int) bool { return choices[a].index < choices[b].index })
	list := make([]json.RawMessage, len(choices))
	for i, c := range choices {
		list[i] = c.raw
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	joined["choices"] = raw
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false) // the bodies' text as the server wrote it
	if err := encoder.Encode(joined); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}
