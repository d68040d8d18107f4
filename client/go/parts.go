package parsetier

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/parsetier/parsetier/client/go/parsetierpb"
)

// parted is a streamed reply type that may arrive in parts (ParseResponse, ParseBatchResponse).
type parted interface {
	proto.Message
	GetPart() *pb.ReplyPart
}

// recvWhole receives one whole reply. A reply larger than the server's --max-reply-bytes arrives
// as several messages carrying only Part (the next bytes of the reply's serialized form, More on
// all but the last; see docs/service.md, "Reply size"): it joins them and parses the result, so
// callers only ever see whole replies. Parts of a reply whose stream broke are dropped with it.
func recvWhole[T parted](recv func() (T, error), whole func() T) (T, error) {
	var zero T
	var data []byte
	inParts := false
	for {
		msg, err := recv()
		if err != nil {
			return zero, err
		}
		part := msg.GetPart()
		if part == nil {
			if inParts {
				return zero, status.Error(codes.Internal, "parsetier: a reply arrived inside the parts of another")
			}
			return msg, nil
		}
		inParts = true
		data = append(data, part.GetData()...)
		if part.GetMore() {
			continue
		}
		reply := whole()
		if err := proto.Unmarshal(data, reply); err != nil {
			return zero, status.Errorf(codes.Internal, "parsetier: the parts of a reply do not parse: %v", err)
		}
		return reply, nil
	}
}
