package pipeline

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
)

// Replies from node agents. A node agent answers log, exec-open and
// metrics requests (LogsPrefix, ExecPrefix, MetricsPrefix). It does not
// answer through NATS's dynamic reply grant (allow_responses): the server
// drops every connection's grants whenever it reloads its users (`podflow
// config bus-user`), and an answer in flight was then refused. Instead the
// requester names a reply subject under its own inbox that says which node
// answers (mux: the requesting connection's, id: the request's),
//
//	_INBOX.<requester>.node.<node>.<mux>.<id>
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
//
// The answers of every node come to one subscription per connection,
// NodeReplyPrefix(<requester>, *).<mux>.*, as nats.go's requests share
// one; an answer counts only on the exact subject its request named, so
// a node that may publish under its own prefix cannot answer for another
// node with the same request id.
func AskNode(ctx context.Context, nc *nats.Conn, subject, node string, data []byte) (*nats.Msg, error) {
	m, err := nodeRepliesOf(nc)
	if err != nil {
		return nil, err
	}
	reply, ch := m.expect(node)
	defer m.forget(reply)
	if err := nc.PublishRequest(subject, reply, data); err != nil {
		return nil, err
	}
	select {
	case msg := <-ch:
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// nodeReplies is a connection's subscription to its nodes' answers and
// the requests waiting for one, by reply subject.
type nodeReplies struct {
	nc     *nats.Conn
	prefix string // the connection's inbox prefix
	mux    string // this subscription's token: <prefix>.node.*.<mux>.*
	sub    *nats.Subscription

	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg
}

// nodeRepliesByConn holds each connection's nodeReplies; those of closed
// connections are dropped whenever one is added.
var nodeRepliesByConn = struct {
	sync.Mutex
	m map[*nats.Conn]*nodeReplies
}{m: map[*nats.Conn]*nodeReplies{}}

// nodeRepliesOf returns nc's nodeReplies, subscribing when nc has none
// (or its subscription ended).
func nodeRepliesOf(nc *nats.Conn) (*nodeReplies, error) {
	all := &nodeRepliesByConn
	all.Lock()
	defer all.Unlock()
	if m := all.m[nc]; m != nil && m.sub.IsValid() {
		return m, nil
	}
	for c := range all.m {
		if c.IsClosed() {
			delete(all.m, c)
		}
	}
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = bus.InboxPrefix("")
	}
	inbox := nc.NewInbox() // <prefix>.<nuid>: its last token is unique
	m := &nodeReplies{nc: nc, prefix: prefix, mux: inbox[strings.LastIndexByte(inbox, '.')+1:], waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(prefix+"."+nodeReplyToken+".*."+m.mux+".*", m.deliver)
	if err != nil {
		return nil, err
	}
	m.sub = sub
	all.m[nc] = m
	return m, nil
}

// expect registers a request to node and returns its reply subject and
// the channel its answer comes on.
func (m *nodeReplies) expect(node string) (string, chan *nats.Msg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	reply := m.prefix + "." + nodeReplyToken + "." + bus.EncodeToken(node) + "." + m.mux + "." + strconv.FormatUint(m.next, 36)
	ch := make(chan *nats.Msg, 1)
	m.waiting[reply] = ch
	return reply, ch
}

// forget drops the request of reply (answered or given up).
func (m *nodeReplies) forget(reply string) {
	m.mu.Lock()
	delete(m.waiting, reply)
	m.mu.Unlock()
}

// deliver hands an answer to the request that named its exact subject
// (the first answer: a request takes one).
func (m *nodeReplies) deliver(msg *nats.Msg) {
	m.mu.Lock()
	ch := m.waiting[msg.Subject]
	delete(m.waiting, msg.Subject)
	m.mu.Unlock()
	if ch != nil {
		ch <- msg
	}
}
