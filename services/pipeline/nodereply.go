package pipeline

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
)

// Replies from node agents. A node agent answers log, exec-open and
// metrics requests (LogsPrefix, ExecPrefix, MetricsPrefix). It does not
// answer through NATS's dynamic reply grant (allow_responses): the server
// drops every connection's grants whenever it reloads its users (`podflow
// config bus-user`), and an answer in flight was then refused. Instead the
// requester names a reply subject under its own inbox that says which node
// answers,
//
//	_INBOX.<requester>.node.<node>.<id>
//
// and the node's role may publish there (NodeReplySubjects), for its own
// node and the roles that ask nodes (NodeRequesters) only. Only the
// requester's identity may subscribe to its inbox, so no other identity
// reads the answer, and a node can publish into no other node's replies,
// nor into any other reply of the requester's (the store's answers, the
// api stage's).

// nodeReplyToken separates a requester's node replies from its other
// inboxes (nats.go's are _INBOX.<requester>.<nuid>…, a NUID is 22
// characters).
const nodeReplyToken = "node"

// NodeRequesters are the roles that ask node agents for logs, exec
// sessions and metrics: the api stage (pods/log, pods/exec, kubectl top)
// and the admin (`podflow logs`).
var NodeRequesters = []string{StageRole(API), bus.RoleAdmin}

// NodeReplyPrefix is where the connections of requester (a bus user)
// receive node's answers: bus.InboxPrefix(requester).node.<node>.
func NodeReplyPrefix(requester, node string) string {
	return bus.InboxPrefix(requester) + "." + nodeReplyToken + "." + bus.EncodeToken(node)
}

// nodeReplySubjects are the subjects the agent of node (token: its
// encoded name, or "*" for a simulated cluster acting for every node) may
// publish its answers to: under each NodeRequesters' NodeReplyPrefix for
// its node.
func nodeReplySubjects(token string) []string {
	out := make([]string, 0, len(NodeRequesters))
	for _, r := range NodeRequesters {
		out = append(out, bus.InboxPrefix(r)+"."+nodeReplyToken+"."+token+".>")
	}
	return out
}

// AskNode sends data to subject, a request to node's agent, and returns
// its answer, received on a reply subject under nc's inbox for node's
// answers (see NodeReplyPrefix), not through a dynamic reply grant. As
// nats.Conn.RequestWithContext: nats.ErrNoResponders when no agent
// listens on subject, ctx's error when none answers in time.
func AskNode(ctx context.Context, nc *nats.Conn, subject, node string, data []byte) (*nats.Msg, error) {
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = bus.InboxPrefix("")
	}
	inbox := nc.NewInbox() // <prefix>.<nuid>: its last token is unique
	reply := prefix + "." + nodeReplyToken + "." + bus.EncodeToken(node) + "." + inbox[strings.LastIndexByte(inbox, '.')+1:]
	sub, err := nc.SubscribeSync(reply)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, reply, data); err != nil {
		return nil, err
	}
	msg, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
		return nil, nats.ErrNoResponders
	}
	return msg, nil
}
