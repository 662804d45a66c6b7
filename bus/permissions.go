package bus

import (
	"slices"
	"strings"
)

// Subject permissions: the building blocks of the per-role NATS users an
// embedded server provisions (EmbeddedConfig.Roles). The policy — which
// role may do what — belongs to whoever knows the lifecycle (package
// services/pipeline); this file only knows how NATS and JetStream name
// things.

// InboxPrefix is the inbox prefix of user's connections: _INBOX.<user>.
// Connect sets it for every connection that authenticates as a user, so
// a role's users may subscribe to their own replies (InboxPrefix(user)+".>")
// and never to anybody else's: a reply from the store to one stage is not
// readable by another identity.
func InboxPrefix(user string) string {
	if user == "" {
		return "_INBOX"
	}
	return "_INBOX." + EncodeToken(user)
}

// AllInboxes matches every reply subject of every user: what a service
// that answers requests on behalf of another process publishes to (the
// answer to a client's request travels along the pipeline with its
// reply subject).
const AllInboxes = "_INBOX.>"

// ConsumeSubjects are the JetStream API subjects a user publishes to in
// order to use an existing durable pull consumer: look it up, pull from
// it and acknowledge what it received. Creating, updating or deleting the
// consumer stays with the admin identity.
func ConsumeSubjects(stream, durable string) []string {
	return []string{
		"$JS.API.CONSUMER.INFO." + stream + "." + durable,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + durable,
		"$JS.ACK." + stream + "." + durable + ".>",
	}
}

// ReadStreamSubjects let a user look a stream up and get one of its
// messages by sequence (how a runner recovers the data of a message that
// exhausted its deliveries).
func ReadStreamSubjects(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream, // podflow's streams do not allow direct gets
	}
}

// PublishSubjects are the subjects a runner with this configuration
// publishes to, besides its handler's outputs: its consumer and its
// advisory consumer (ConsumeSubjects), its stream's messages
// (ReadStreamSubjects) and its dead-letter subject.
func (c RunnerConfig) PublishSubjects() []string {
	adv := c.AdvisoryConsumerSpec()
	dlq := c.DeadLetterSubject
	if dlq == "" {
		dlq = DLQSubject(c.Stage)
	}
	out := ConsumeSubjects(c.Stream, c.Consumer)
	out = append(out, ConsumeSubjects(adv.Stream, adv.Durable)...)
	out = append(out, ReadStreamSubjects(c.Stream)...)
	return append(out, dlq)
}

// Merge returns the union of permissions: allowed subjects are added,
// denied subjects are added, and responses are allowed if either allows
// them. A nil Permissions allows everything, so merging with nil is nil.
func (p *Permissions) Merge(o *Permissions) *Permissions {
	if p == nil || o == nil {
		return nil
	}
	return &Permissions{
		Publish:        p.Publish.merge(o.Publish),
		Subscribe:      p.Subscribe.merge(o.Subscribe),
		AllowResponses: p.AllowResponses || o.AllowResponses,
	}
}

func (s *SubjectPermission) merge(o *SubjectPermission) *SubjectPermission {
	if s == nil && o == nil {
		return nil
	}
	var out SubjectPermission
	for _, x := range []*SubjectPermission{s, o} {
		if x != nil {
			out.Allow = append(out.Allow, x.Allow...)
			out.Deny = append(out.Deny, x.Deny...)
		}
	}
	out.Allow, out.Deny = uniq(out.Allow), uniq(out.Deny)
	return &out
}

func uniq(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// RoleSpec declares a NATS user of an embedded server: its role (also its
// user name) and what it may publish and subscribe to. The server
// generates the user's password on first use and keeps it in the
// credentials file; the permissions are taken from the spec on every
// start, so a newer policy applies to existing users.
type RoleSpec struct {
	Role        string
	Permissions *Permissions
}

func (r RoleSpec) validate() error {
	switch {
	case r.Role == "" || strings.ContainsAny(r.Role, ".*> \t\n"):
		return invalidf("role %q is not a valid NATS token", r.Role)
	case r.Role == RoleAdmin:
		return invalidf("role %q is built in", r.Role)
	case strings.HasPrefix(r.Role, UserRolePrefix):
		return invalidf("role %q: the prefix %q is for users of podflow (AddUser)", r.Role, UserRolePrefix)
	case r.Permissions == nil:
		return invalidf("role %q has no permissions: only %q may do everything", r.Role, RoleAdmin)
	}
	return nil
}
