package eventsv1

import (
	"strconv"
	"strings"
)

// EventID returns the deterministic id of env, used as its Nats-Msg-Id so
// that publishing the same event twice within the stream's duplicate
// window stores it once. It is built from the event's subject of record
// (pod uid, else request id, else node name, else namespace/name), its
// type, generation and attempt:
//
//	uid/<pod_uid>/<Type>/g<generation>/a<attempt>
//
// Two distinct events of one type about one pod must therefore differ
// in generation or attempt (node agents use a node-local sequence as the
// generation of their reports, as events.proto says), or carry an
// explicit env.Id. This is the one definition of the format: the bus
// fills env.Id with it, and node agents build their reports' ids with it.
func EventID(env *Envelope) string {
	var key string
	switch {
	case env.GetPodUid() != "":
		key = "uid/" + env.GetPodUid()
	case env.GetRequestId() != "":
		key = "req/" + env.GetRequestId()
	case env.GetNodeName() != "" && env.GetNamespace() == "" && env.GetPodName() == "":
		key = "node/" + env.GetNodeName()
	default:
		key = "obj/" + env.GetNamespace() + "/" + env.GetPodName()
	}
	var b strings.Builder
	b.Grow(len(key) + 48)
	b.WriteString(key)
	b.WriteByte('/')
	b.WriteString(string(env.Type()))
	b.WriteString("/g")
	b.WriteString(strconv.FormatInt(env.GetGeneration(), 10))
	b.WriteString("/a")
	b.WriteString(strconv.FormatInt(int64(env.GetAttempt()), 10))
	return b.String()
}
