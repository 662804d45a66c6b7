package bus

import (
	"fmt"
	"strings"

	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// Subject prefixes. See doc.go for the scheme.
const (
	// PodPrefix is the prefix of every pod lifecycle event:
	// podflow.pod.<Type>.<node>.<namespace>.<name>.
	PodPrefix = "podflow.pod"
	// NodePrefix is the prefix of node-level events:
	// podflow.node.<node>.<Type>.
	NodePrefix = "podflow.node"
	// DLQPrefix is the prefix of dead-letter records: podflow.dlq.<stage>.
	DLQPrefix = "podflow.dlq"
	// APIPrefix is reserved for request-reply to the api front door
	// (podflow.api.>). No stream may capture it.
	APIPrefix = "podflow.api"
	// StorePrefix is reserved for request-reply to the raft store
	// (podflow.store.>). No stream may capture it.
	StorePrefix = "podflow.store"
)

// Stream names.
const (
	// EventsStream holds every pod lifecycle event (podflow.pod.>).
	EventsStream = "PODFLOW_EVENTS"
	// NodesStream holds node-level events such as heartbeats
	// (podflow.node.>), keeping only the last few per node and type.
	NodesStream = "PODFLOW_NODES"
	// DLQStream holds dead-letter records (podflow.dlq.>).
	DLQStream = "PODFLOW_DLQ"
	// AdvisoriesStream keeps the server's max-deliveries advisories
	// ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>) until a stage
	// replica records them as dead letters.
	AdvisoriesStream = "PODFLOW_ADVISORIES"
)

// MaxDeliveriesAdvisoryPrefix is the subject prefix of the server's
// advisories for messages that exhausted a consumer's MaxDeliver.
const MaxDeliveriesAdvisoryPrefix = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"

// MaxDeliveriesSubject is the advisory subject of one consumer.
func MaxDeliveriesSubject(stream, consumer string) string {
	return MaxDeliveriesAdvisoryPrefix + "." + stream + "." + consumer
}

// SubjectKind tells which family a subject belongs to.
type SubjectKind int

const (
	// KindPod is podflow.pod.<Type>.<node>.<namespace>.<name>.
	KindPod SubjectKind = iota + 1
	// KindNode is podflow.node.<node>.<Type>.
	KindNode
	// KindDeadLetter is podflow.dlq.<stage>.
	KindDeadLetter
)

func (k SubjectKind) String() string {
	switch k {
	case KindPod:
		return "pod"
	case KindNode:
		return "node"
	case KindDeadLetter:
		return "dlq"
	}
	return fmt.Sprintf("SubjectKind(%d)", int(k))
}

// SubjectInfo is a parsed subject. Fields that the kind does not carry
// are empty. Node, Namespace, Name and Stage are decoded (original
// Kubernetes names, possibly containing '.').
type SubjectInfo struct {
	Kind      SubjectKind
	Type      eventsv1.Type
	Node      string
	Namespace string
	Name      string
	Stage     string
}

// String rebuilds the subject; ParseSubject(info.String()) == info.
func (i SubjectInfo) String() string {
	switch i.Kind {
	case KindPod:
		return PodPrefix + "." + string(i.Type) + "." + EncodeToken(i.Node) + "." + EncodeToken(i.Namespace) + "." + EncodeToken(i.Name)
	case KindNode:
		return NodePrefix + "." + EncodeToken(i.Node) + "." + string(i.Type)
	case KindDeadLetter:
		return DLQPrefix + "." + EncodeToken(i.Stage)
	}
	return ""
}

// NodeLevel reports whether events of type t concern a node as a whole
// rather than a pod, and so travel on podflow.node.<node>.<Type> in the
// NodesStream. Today that is NodeHeartbeat only.
func NodeLevel(t eventsv1.Type) bool {
	return t == "NodeHeartbeat"
}

// Subject returns the subject env is published on:
//
//   - node-level types (NodeLevel): podflow.node.<node>.<Type>
//   - DeadLetter: podflow.dlq.<stage>
//   - every other type: podflow.pod.<Type>.<node>.<namespace>.<name>,
//     where <node> is env.NodeName, or the empty-token "~" while the pod
//     is not addressed to or from a node.
//
// Tokens are encoded with EncodeToken. Subject does not validate env;
// Publish does (see ValidateEnvelope).
func Subject(env *eventsv1.Envelope) string {
	return subjectInfo(env).String()
}

func subjectInfo(env *eventsv1.Envelope) SubjectInfo {
	t := env.Type()
	switch {
	case t == "DeadLetter":
		return SubjectInfo{Kind: KindDeadLetter, Type: t, Stage: env.GetStage()}
	case NodeLevel(t):
		return SubjectInfo{Kind: KindNode, Type: t, Node: env.GetNodeName()}
	}
	return SubjectInfo{Kind: KindPod, Type: t, Node: env.GetNodeName(), Namespace: env.GetNamespace(), Name: env.GetPodName()}
}

// ValidateEnvelope checks what Publish needs: a payload, a node name on
// node-level events, a stage on dead letters.
func ValidateEnvelope(env *eventsv1.Envelope) error {
	if env == nil {
		return invalidf("nil envelope")
	}
	t := env.Type()
	switch {
	case t == "":
		return invalidf("envelope %q has no payload", env.GetId())
	case NodeLevel(t) && env.GetNodeName() == "":
		return invalidf("%s envelope %q has no node_name", t, env.GetId())
	case t == "DeadLetter" && env.GetStage() == "":
		return invalidf("DeadLetter envelope %q has no stage", env.GetId())
	}
	return nil
}

// TypeFilter returns the filter subject matching every event of type t.
func TypeFilter(t eventsv1.Type) string {
	switch {
	case t == "DeadLetter":
		return DLQPrefix + ".>"
	case NodeLevel(t):
		return NodePrefix + ".*." + string(t)
	}
	return PodPrefix + "." + string(t) + ".>"
}

// NodeFilter returns the filter subject matching every pod event
// addressed to or coming from node (podflow.pod.*.<node>.>). Node-level
// events of the node match NodeEventsFilter.
func NodeFilter(node string) string {
	return PodPrefix + ".*." + EncodeToken(node) + ".>"
}

// TypeNodeFilter matches events of type t addressed to or from node:
// what a node agent consumes (e.g. PodScheduled for its own node).
func TypeNodeFilter(t eventsv1.Type, node string) string {
	if NodeLevel(t) {
		return NodePrefix + "." + EncodeToken(node) + "." + string(t)
	}
	return PodPrefix + "." + string(t) + "." + EncodeToken(node) + ".>"
}

// NodeEventsFilter matches node-level events of one node.
func NodeEventsFilter(node string) string {
	return NodePrefix + "." + EncodeToken(node) + ".>"
}

// PodFilter matches every event of one pod, whatever its node.
func PodFilter(namespace, name string) string {
	return PodPrefix + ".*.*." + EncodeToken(namespace) + "." + EncodeToken(name)
}

// DLQSubject is the dead-letter subject of a stage.
func DLQSubject(stage string) string {
	return DLQPrefix + "." + EncodeToken(stage)
}

// ParseSubject parses a subject built by Subject (or SubjectInfo.String).
// It accepts only canonical encodings, so parsing is the exact inverse
// of building.
func ParseSubject(s string) (SubjectInfo, error) {
	toks := strings.Split(s, ".")
	bad := func(why string) (SubjectInfo, error) {
		return SubjectInfo{}, invalidf("subject %q: %s", s, why)
	}
	if len(toks) < 3 || toks[0] != "podflow" {
		return bad("not a podflow event subject")
	}
	dec := func(i int, dst *string) error {
		v, err := DecodeToken(toks[i])
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
	var info SubjectInfo
	switch toks[1] {
	case "pod":
		if len(toks) != 6 {
			return bad("want podflow.pod.<Type>.<node>.<namespace>.<name>")
		}
		if !validType(toks[2]) {
			return bad("invalid type token")
		}
		info = SubjectInfo{Kind: KindPod, Type: eventsv1.Type(toks[2])}
		for i, dst := range []*string{&info.Node, &info.Namespace, &info.Name} {
			if err := dec(3+i, dst); err != nil {
				return bad(err.Error())
			}
		}
	case "node":
		if len(toks) != 4 {
			return bad("want podflow.node.<node>.<Type>")
		}
		if !validType(toks[3]) {
			return bad("invalid type token")
		}
		info = SubjectInfo{Kind: KindNode, Type: eventsv1.Type(toks[3])}
		if err := dec(2, &info.Node); err != nil {
			return bad(err.Error())
		}
	case "dlq":
		if len(toks) != 3 {
			return bad("want podflow.dlq.<stage>")
		}
		info = SubjectInfo{Kind: KindDeadLetter, Type: "DeadLetter"}
		if err := dec(2, &info.Stage); err != nil {
			return bad(err.Error())
		}
	default:
		return bad("unknown family " + fmt.Sprintf("%q", toks[1]))
	}
	return info, nil
}

// validType: event types are Go identifiers made of ASCII letters and
// digits, starting with an upper-case letter.
func validType(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789ABCDEF"

// EncodeToken encodes a name as one NATS subject token, deterministically
// and reversibly:
//
//   - ASCII letters, digits and '-' are kept;
//   - '.' becomes '_' (Kubernetes names never contain '_', so a dotted
//     name stays readable: "web.example" → "web_example");
//   - every other byte becomes '~' followed by two upper-case hex digits
//     ("a_b" → "a~5Fb", "a b" → "a~20b");
//   - the empty string becomes "~".
//
// The result never contains '.', '*', '>' or whitespace.
func EncodeToken(s string) string {
	if s == "" {
		return "~"
	}
	if plainToken(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plainByte(c):
			b.WriteByte(c)
		case c == '.':
			b.WriteByte('_')
		default:
			b.WriteByte('~')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
		}
	}
	return b.String()
}

// DecodeToken is the inverse of EncodeToken. It rejects tokens that
// EncodeToken would never produce.
func DecodeToken(tok string) (string, error) {
	if tok == "~" {
		return "", nil
	}
	if tok == "" {
		return "", invalidf("empty token")
	}
	if plainToken(tok) {
		return tok, nil
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case plainByte(c):
			b.WriteByte(c)
		case c == '_':
			b.WriteByte('.')
		case c == '~':
			if i+2 >= len(tok) {
				return "", invalidf("token %q: truncated escape", tok)
			}
			hi, lo := unhex(tok[i+1]), unhex(tok[i+2])
			if hi < 0 || lo < 0 {
				return "", invalidf("token %q: bad escape", tok)
			}
			v := byte(hi<<4 | lo)
			if plainByte(v) || v == '.' {
				return "", invalidf("token %q: non-canonical escape", tok)
			}
			b.WriteByte(v)
			i += 2
		default:
			return "", invalidf("token %q: invalid byte %q", tok, c)
		}
	}
	return b.String(), nil
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			return false
		}
	}
	return true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
