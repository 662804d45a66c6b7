package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
)

// DefaultTokenRequestTimeout bounds a RequestNodeToken whose ctx has no
// deadline.
const DefaultTokenRequestTimeout = 10 * time.Second

// TokenRefusedError is the api stage's refusal of a NodeTokenRequest: its
// Status code (403, 404, 409, 422 …), reason and message. Match it by
// code with errors.As.
type TokenRefusedError struct{ Status *corev1.Status }

func (e *TokenRefusedError) Error() string { return e.Status.GetMessage() }

// Code is the refusal's HTTP status code.
func (e *TokenRefusedError) Code() int32 { return e.Status.GetCode() }

// ErrNotNodeIdentity: the connection a token is asked over is not a node
// agent's bus identity (NodeRole, SimNodesRole), e.g. a node agent started
// with the admin's bus configuration. The api stage answers a token
// request only into a node role's inbox and drops any other, so the
// request is not sent: it would only time out.
var ErrNotNodeIdentity = errors.New("not a node's bus identity")

// checkNodeIdentity returns ErrNotNodeIdentity, naming nc's bus user,
// unless nc is a node role's connection (its inboxes are that role's).
func checkNodeIdentity(nc *nats.Conn) error {
	inbox := nc.NewInbox()
	for _, p := range []string{bus.InboxPrefix(NodeRolePrefix), bus.InboxPrefix(SimNodesRolePrefix)} {
		if strings.HasPrefix(inbox, p) {
			return nil
		}
	}
	user := "an unnamed user"
	if rest, ok := strings.CutPrefix(inbox, bus.InboxPrefix("")+"."); ok {
		if i := strings.IndexByte(rest, '.'); i > 0 {
			user = fmt.Sprintf("%q", rest[:i])
		}
	}
	return fmt.Errorf("%w: this node agent is connected to the bus as %s, not with its node's identity (%s<node>), and the api stage gives ServiceAccount tokens only to a node agent: start it with its node's bus configuration (podflow join)", ErrNotNodeIdentity, user, NodeRolePrefix)
}

// TokenSubject is the subject node's agent asks for tokens on.
func TokenSubject(node string) string { return TokenPrefix + "." + bus.EncodeToken(node) }

// RequestNodeToken asks the api stage, as node's agent over nc, for the
// token req describes (see apiv1.NodeTokenRequest). A connection that is
// not a node agent's identity fails at once with ErrNotNodeIdentity. A
// refusal is a *TokenRefusedError; no answer before ctx's deadline (default
// DefaultTokenRequestTimeout) is the context's error.
func RequestNodeToken(ctx context.Context, nc *nats.Conn, node string, req *apiv1.NodeTokenRequest) (string, time.Time, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTokenRequestTimeout)
		defer cancel()
	}
	if err := checkNodeIdentity(nc); err != nil {
		return "", time.Time{}, err
	}
	data, err := proto.Marshal(req)
	if err != nil {
		return "", time.Time{}, err
	}
	m, err := nc.RequestWithContext(ctx, TokenSubject(node), data)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("request a token of %s/%s: %w", req.GetNamespace(), req.GetPodName(), err)
	}
	resp := &apiv1.NodeTokenResponse{}
	if err := proto.Unmarshal(m.Data, resp); err != nil {
		return "", time.Time{}, fmt.Errorf("decode the token answer: %w", err)
	}
	if st := resp.GetStatus(); st != nil && (st.GetCode() < 200 || st.GetCode() > 299) {
		return "", time.Time{}, &TokenRefusedError{Status: st}
	}
	return resp.GetToken(), resp.GetExpiration().AsTime(), nil
}
