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
//	nodeagent-<node>  pull its own consumer, publish NodeAgentOutputs and
//	                  heartbeats for its node only, answer its node's log
//	                  requests, use the store (NodeAgentRole)
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

// RoleStore is the bus role of the store replicas.
const RoleStore = "store"

// StageRole is the bus role (and NATS user) of stage's replicas.
func StageRole(stage string) string { return "stage-" + stage }

// Roles are the restricted NATS users of podflow's stages and store, for
// the embedded server (bus.EmbeddedConfig.Roles). Node agents' roles
// depend on the nodes: see NodeAgentRole.
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

// NodeAgentRole is the bus role of one node agent process, whose runner is
// rc, acting for nodes: named after its consumer, it may pull only that
// consumer, publish events and heartbeats only about its own nodes, and
// answer log requests only for them — the NodeRestriction of the bus: a
// node cannot take another node's pods or report for it. nil nodes means
// any node (the simulated cluster, one process standing in for many).
func NodeAgentRole(rc bus.RunnerConfig, nodes []string) bus.RoleSpec {
	tokens := []string{"*"}
	if nodes != nil {
		tokens = tokens[:0]
		for _, n := range nodes {
			tokens = append(tokens, bus.EncodeToken(n))
		}
	}
	pub := rc.PublishSubjects()
	var sub []string
	for _, n := range tokens {
		for _, t := range NodeAgentOutputs {
			pub = append(pub, bus.PodPrefix+"."+string(t)+"."+n+".>")
		}
		pub = append(pub, bus.NodePrefix+"."+n+".>")
		sub = append(sub, LogsPrefix+"."+n)
	}
	return bus.RoleSpec{Role: rc.Consumer, Permissions: service(rc.Consumer).Merge(&bus.Permissions{
		Publish:   &bus.SubjectPermission{Allow: pub},
		Subscribe: &bus.SubjectPermission{Allow: sub},
	})}
}
