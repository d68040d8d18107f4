package parsetier

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestRetryRule checks retryable against the proto's retry rule (the comment on ParserService):
// the trailers first, then the code, never the message.
func TestRetryRule(t *testing.T) {
	fault := metadata.Pairs(faultTrailer, "server")
	handoff := metadata.Pairs(handoffTrailer, "resume")
	cases := []struct {
		code    codes.Code
		message string
		trailer metadata.MD
		want    bool
	}{
		{codes.Internal, "internal server error; the server log has the details", fault, false},
		{codes.Unavailable, "anything", fault, false},
		{codes.Internal, "internal server error; the server log has the details", nil, true},
		{codes.Internal, "stream terminated by RST_STREAM with error code: INTERNAL_ERROR", nil, true},
		{codes.Unknown, "a proxy's page", nil, true},
		{codes.Canceled, "", nil, true},
		{codes.Unavailable, "server is draining", handoff, true},
		{codes.InvalidArgument, "unexpected HTTP status code", nil, false},
		{codes.FailedPrecondition, "Internal", nil, false},
	}
	for _, c := range cases {
		if got := retryable(context.Background(), status.Error(c.code, c.message), c.trailer); got != c.want {
			t.Errorf("retryable(%v %q, %v) = %v, want %v", c.code, c.message, c.trailer, got, c.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if retryable(ctx, status.Error(codes.Canceled, ""), nil) {
		t.Error("a cancel of the session's own context was retried")
	}
}
