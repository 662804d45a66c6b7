package pipeline

import (
	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Who may do what on the bus. The embedded NATS server provisions one user
// per role (bus.EmbeddedConfig.Roles); `podflow up` hands each process the
// credentials of its role, so the server itself refuses a stage that
// publishes another stage's events or pulls another stage's inputs:
//
//	admin             everything: provisions streams and consumers (up, the CLI)
//	client            ask the api front door, publish PodRequested (bus.RoleClient)
//	stage-<stage>     pull its own consumer, publish its Outputs, use the store
//	store             serve podflow.store.> and push watches
//	node              pull node agents' consumers, publish NodeAgentOutputs and
//	                  heartbeats, answer log requests, use the store
//
// Every role but client also answers pings, reads its own inbox only
// (bus.InboxPrefix) and may reply to requests it receives.

// Outputs are the event types each stage publishes onto the events stream.
// A stage's NATS user may publish these and nothing else there.
var Outputs = map[string][]eventsv1.Type{
	// The HTTPS front door turns requests into PodRequested; deletions of
	// pods the api stage ends itself (no node) are PodDeleted.
	API:         {"PodRequested", "PodAuthorized", "PodRejected", "PodDeleteRequested", "PodDeleted"},
	Admission:   {"PodAdmitted", "PodRejected"},
	Persistence: {"PodPersisted", "PodRejected"},
	Scheduler:   {"PodScheduled", "PodUnschedulable"},
	Status:      {},
	Endpoints:   {"EndpointsUpdated"},
}

// NodeAgentOutputs are the event types a node agent publishes about the
// pods of its node.
var NodeAgentOutputs = []eventsv1.Type{
	"PodSandboxReady", "ImagePulling", "ImagePulled", "ContainerStarted", "ContainerExited",
	"PodRunning", "PodReady", "PodNotReady", "PodFailed", "PodKilled", "PodDeleted", "PodStatusReport",
}

// Operational subjects (core NATS request-reply, never in a stream).
const (
	// PingSubject: every podflow process answers a ping with who it is.
	PingSubject = "podflow.ops.ping"
	// LogsPrefix: a node agent answers log requests on LogsPrefix.<node>.
	LogsPrefix = "podflow.ops.logs"
)

// Bus roles besides bus.RoleAdmin and bus.RoleClient.
const (
	RoleStore = "store"
	RoleNode  = "node"
)

// StageRole is the bus role (and NATS user) of stage's replicas.
func StageRole(stage string) string { return "stage-" + stage }

// Roles are the restricted NATS users of podflow's processes, for the
// embedded server (bus.EmbeddedConfig.Roles).
func Roles() []bus.RoleSpec {
	out := make([]bus.RoleSpec, 0, len(Stages)+2)
	for _, s := range Stages {
		out = append(out, bus.RoleSpec{Role: StageRole(s), Permissions: stagePermissions(s)})
	}
	out = append(out,
		bus.RoleSpec{Role: RoleStore, Permissions: service(RoleStore).Merge(&bus.Permissions{
			// Serve the store; answer writes, reads and watch pushes to
			// whoever asked (a watch's events go to the watcher's inbox).
			Publish:   &bus.SubjectPermission{Allow: []string{bus.AllInboxes}},
			Subscribe: &bus.SubjectPermission{Allow: []string{bus.StorePrefix + ".>"}},
		})},
		bus.RoleSpec{Role: RoleNode, Permissions: nodePermissions()},
	)
	return out
}

// service is what every podflow process needs: its own inbox, the store
// as a client, pings, and replies to requests it receives.
func service(user string) *bus.Permissions {
	return &bus.Permissions{
		Publish:        &bus.SubjectPermission{Allow: []string{bus.StorePrefix + ".>"}},
		Subscribe:      &bus.SubjectPermission{Allow: []string{bus.InboxPrefix(user) + ".>", PingSubject}},
		AllowResponses: true,
	}
}

func stagePermissions(stage string) *bus.Permissions {
	cfg, err := RunnerConfig(stage, "")
	if err != nil {
		panic(err) // Stages and Inputs are declared together
	}
	pub := cfg.PublishSubjects()
	for _, t := range Outputs[stage] {
		pub = append(pub, bus.TypeFilter(t))
	}
	var sub []string
	switch stage {
	case API:
		// The front door (podflow.api.>) and the nodes' logs.
		sub = append(sub, bus.APIPrefix+".>")
		pub = append(pub, LogsPrefix+".*")
		fallthrough
	case Admission, Persistence:
		// A request's answer comes from the stage that ends it, which is
		// not the one that received it: these publish to the asker's inbox.
		pub = append(pub, bus.AllInboxes)
	}
	return service(StageRole(stage)).Merge(&bus.Permissions{
		Publish:   &bus.SubjectPermission{Allow: pub},
		Subscribe: &bus.SubjectPermission{Allow: sub},
	})
}

// nodePermissions: node agents share one identity, as kubelets share the
// system:nodes group. Their consumers are named per node, and NATS
// permissions match whole tokens only, so the role may use any consumer of
// the events stream except the stages'.
func nodePermissions() *bus.Permissions {
	pub := bus.ConsumeSubjects(bus.EventsStream, "*")
	pub = append(pub, bus.ReadStreamSubjects(bus.EventsStream)...)
	pub = append(pub, bus.DLQSubject(NodeAgentRunnerConfig("").Stage))
	var deny []string
	for _, s := range Stages {
		cfg, _ := RunnerConfig(s, "")
		deny = append(deny, bus.ConsumeSubjects(cfg.Stream, cfg.Consumer)...)
		adv := cfg.AdvisoryConsumerSpec()
		deny = append(deny, bus.ConsumeSubjects(adv.Stream, adv.Durable)...)
	}
	// The advisory consumer of node "x" is "nodeagent-x-maxdeliver": one
	// token, matched by the wildcard above only as "*".
	pub = append(pub, bus.ConsumeSubjects(bus.AdvisoriesStream, "*")...)
	for _, t := range NodeAgentOutputs {
		pub = append(pub, bus.TypeFilter(t))
	}
	pub = append(pub, bus.NodePrefix+".>")
	return service(RoleNode).Merge(&bus.Permissions{
		Publish:   &bus.SubjectPermission{Allow: pub, Deny: deny},
		Subscribe: &bus.SubjectPermission{Allow: []string{LogsPrefix + ".*"}},
	})
}
