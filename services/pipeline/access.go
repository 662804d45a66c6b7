package pipeline

import (
	"strings"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
)

// Who may do what on the bus. The embedded NATS server provisions one user
// per role (bus.EmbeddedConfig.Roles); `podflow up` hands each process the
// credentials of its role, so the server itself refuses a stage that
// publishes another stage's events or pulls another stage's inputs:
//
//	admin             everything: provisions streams and consumers (up, the CLI)
//	user-<api user>   one per person or program: ask the api front door,
//	                  read its own inbox (bus.UserRole, bus.UserPermissions)
//	stage-<stage>     pull its own consumer, publish its Outputs, use the store
//	store             serve podflow.store.> and push watches
//	node-<node>       pull its own consumer, publish NodeAgentOutputs and
//	                  heartbeats for its node only, answer its node's log,
//	                  exec and metrics requests (into the requesters' node
//	                  reply inboxes, NodeReplyPrefix), ask the api stage for its pods'
//	                  ServiceAccount tokens (TokenPrefix.<node>), use the store
//	                  (NodeAgentRole); a simulated cluster's agent (nodes-<name>)
//	                  acts for any node
//
// Every role but the users also answers pings, reads its own inbox only
// (bus.InboxPrefix), acknowledges its own store streams
// (StoreAckSubjects) and may reply to requests it receives.

// Outputs are the event types each stage publishes onto the events stream.
// A stage's NATS user may publish these and nothing else there.
var Outputs = map[string][]eventsv1.Type{
	// The HTTPS front door turns requests into PodRequested; deletions of
	// pods the api stage ends itself (no node) are PodDeleted.
	API:         {"PodRequested", "PodAuthorized", "PodRejected", "PodDeleteRequested", "PodDeleted"},
	Admission:   {"PodAdmitted", "PodRejected"},
	Persistence: {"PodPersisted", "PodRejected"},
	Scheduler:   {"PodScheduled", "PodUnschedulable", "PodDeleteRequested"}, // the victims of a preemption
	Status:      {},
	Endpoints:   {"EndpointsUpdated"},
	// Controller stages write the store; the workload controllers also
	// hand the pods they delete to their nodes (stage.DeletePod), and the node lifecycle controller the pods it
	// evicts.
	ServiceAccount:        nil,
	RootCACert:            nil,
	ReplicaSet:            {"PodDeleteRequested", "PodDeleted"},
	ReplicationController: {"PodDeleteRequested", "PodDeleted"},
	ResourceQuota:         nil,
	NodeLifecycle:         {"PodDeleteRequested", "PodDeleted"},
	Job:                   {"PodDeleteRequested", "PodDeleted"},
	CronJob:               {"PodDeleteRequested", "PodDeleted"}, // the pods of the Jobs it deletes
	Deployment:            nil,
	StatefulSet:           {"PodDeleteRequested", "PodDeleted"},
	DaemonSet:             {"PodDeleteRequested", "PodDeleted"},
	GarbageCollector:      {"PodDeleteRequested", "PodDeleted"}, // the pods it deletes
	Disruption:            nil,
	TTLAfterFinished:      nil,
}

// NodeAgentOutputs are the event types a node agent publishes about the
// pods of its node. PodReady and PodNotReady are not among them: they
// travel only inside its PodStatusReport (eventsv1.ReadinessSteps).
var NodeAgentOutputs = []eventsv1.Type{
	"PodSandboxReady", "ImagePulling", "ImagePulled", "ContainerStarted", "ContainerExited",
	"PodRunning", "PodFailed", "PodKilled", "PodDeleted", "PodStatusReport",
}

// Operational subjects (core NATS request-reply, never in a stream).
const (
	// PingSubject: every podflow process answers a ping with who it is.
	PingSubject = "podflow.ops.ping"
	// LogsPrefix: a node agent answers log requests on LogsPrefix.<node>.
	LogsPrefix = "podflow.ops.logs"
	// ExecPrefix: a node agent accepts exec and attach sessions on
	// ExecPrefix.<node>; a session's frames travel on
	// ExecPrefix.<node>.<session>.in (to the node) and .out (from it).
	ExecPrefix = "podflow.ops.exec"
	// MetricsPrefix: a node agent answers resource usage requests
	// (services/podmetrics) on MetricsPrefix.<node>.
	MetricsPrefix = "podflow.ops.metrics"
	// TokenPrefix: a node agent asks the api stage for a projected
	// serviceAccountToken of a pod bound to it on TokenPrefix.<node>
	// (apiv1.NodeTokenRequest); only that node's agent may publish there
	// and only the api stage receives it, so the subject names the
	// requesting node as the NATS server authenticated it — the api
	// stage's NodeRestriction checks the pod against it.
	TokenPrefix = "podflow.ops.token"
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

// StoreAckSubjects are the store's acknowledgement subjects of the streams
// user asked for (a watch's heartbeats, a list's windows: raftstore's
// acks.go), <store>.ack.<replica>.<stream>.<user>: a role acknowledges its
// own streams by a permission of its name, not by the NATS server's
// dynamic reply grant, which a reload of the bus's users drops.
func StoreAckSubjects(user string) string { return bus.StorePrefix + ".ack.*.*." + user }

// service is what every podflow process needs: its own inbox, the store
// as a client (reads, watches and writes named after itself: see
// StoreReadACL and StoreWriteACL; the acknowledgements of its streams:
// StoreAckSubjects), pings, and replies to requests it receives.
func service(user string) *bus.Permissions {
	store := bus.StorePrefix + "."
	return &bus.Permissions{
		Publish: &bus.SubjectPermission{Allow: []string{
			store + "read." + user, store + "stale." + user, store + "watch." + user, store + "write." + user, store + "status",
			StoreAckSubjects(user),
		}},
		Subscribe:      &bus.SubjectPermission{Allow: []string{bus.InboxPrefix(user) + ".>", PingSubject}},
		AllowResponses: true,
	}
}

func stagePermissions(stage string) *bus.Permissions {
	cfg, err := RunnerConfig(stage, "")
	if err != nil {
		panic(err) // Stages and Inputs are declared together
	}
	var pub []string
	if !Controller(stage) { // a controller stage has no consumer
		pub = cfg.PublishSubjects()
	}
	for _, t := range Outputs[stage] {
		pub = append(pub, bus.TypeFilter(t))
	}
	var sub []string
	if MakesPods(stage) {
		pub = append(pub, ControllerPodsSubject(stage)) // its pods, asked of the api stage
	}
	switch stage {
	case API:
		// The front door (podflow.api.>), the nodes' token requests, the
		// controllers' pod requests, the nodes' logs and exec sessions.
		sub = append(sub, bus.APIPrefix+".>", TokenPrefix+".*", ControllerPodsPrefix+".*")
		pub = append(pub, LogsPrefix+".*", ExecPrefix+".*", ExecPrefix+".*.*.in", MetricsPrefix+".*")
		sub = append(sub, ExecPrefix+".*.*.out")
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

// Node agent roles: NodeRole(node) for the agent of one node,
// SimNodesRole(name) for a simulated cluster (one process standing in for
// many nodes).
func NodeRole(node string) string     { return NodeRolePrefix + bus.EncodeToken(node) }
func SimNodesRole(name string) string { return SimNodesRolePrefix + bus.EncodeToken(name) }

// NodeRolePrefix and SimNodesRolePrefix begin the node roles' names
// (and so their inboxes, bus.InboxPrefix).
const (
	NodeRolePrefix     = "node-"
	SimNodesRolePrefix = "nodes-"
)

// NodeAgentRole is the bus role of one node agent process, whose runner is
// rc, acting for node: it may pull only that consumer, publish events and
// heartbeats only about its own node, answer log (exec, metrics) requests only for it and
// write only its own Node (StoreWriteACL) — the NodeRestriction of the bus
// and the store: a node cannot take another node's pods, report for it or
// rewrite it. An empty node is a simulated cluster (SimNodesRole of
// rc.Replica), which acts for any node.
func NodeAgentRole(rc bus.RunnerConfig, node string) bus.RoleSpec {
	role, token := SimNodesRole(rc.Replica), "*"
	if node != "" {
		role, token = NodeRole(node), bus.EncodeToken(node)
	}
	pub := rc.PublishSubjects()
	for _, t := range NodeAgentOutputs {
		pub = append(pub, bus.PodPrefix+"."+string(t)+"."+token+".>")
	}
	pub = append(pub, bus.NodePrefix+"."+token+".>", ExecPrefix+"."+token+".*.out", TokenPrefix+"."+token)
	pub = append(pub, nodeReplySubjects(token)...) // its answers (nodereply.go)
	sub := []string{LogsPrefix + "." + token, ExecPrefix + "." + token, ExecPrefix + "." + token + ".*.in", MetricsPrefix + "." + token}
	return bus.RoleSpec{Role: role, Permissions: service(role).Merge(&bus.Permissions{
		Publish:   &bus.SubjectPermission{Allow: pub},
		Subscribe: &bus.SubjectPermission{Allow: sub},
	})}
}

// StoreReadACL is the store's read policy (raftstore.Config.ReadACL): the
// api stage (tokens, the Kubernetes API) and node agents (secret volumes)
// may ask for everything — a node agent is then shown only its part of
// it, by StoreReadFilter —, and so may the resourcequota controller (it
// counts Secrets for the secrets quota, as kube's lists them), and so may
// the garbage collector (it watches every object for deletions, a watch of
// /registry/ includes Secrets, and kube's generic-garbage-collector may
// get, list and watch every resource); every
// other reader everything but Secrets —
// neither a Secret, nor a list or watch of a prefix that would include
// them, nor a transaction comparing one.
func StoreReadACL(user, key string, prefix bool) bool {
	if user == StageRole(API) || user == StageRole(ResourceQuota) || user == StageRole(GarbageCollector) || strings.HasPrefix(user, NodeRolePrefix) || strings.HasPrefix(user, SimNodesRolePrefix) {
		return true
	}
	secrets := objects.Secrets.Prefix("")
	return !strings.HasPrefix(key, secrets) && !(prefix && strings.HasPrefix(secrets, key))
}

// StoreReplyACL is the store's reply policy (raftstore.Config.ReplyACL):
// a role has answers and watch streams sent only to its own inboxes
// (bus.InboxPrefix), which only its connections may subscribe to.
func StoreReplyACL(user, subject string) bool {
	return strings.HasPrefix(subject, bus.InboxPrefix(user)+".")
}

// PodCIDRPrefix holds one store key per allocated pod CIDR; its value is
// the node that has it (written by Linux node agents).
const PodCIDRPrefix = "/registry/podflow/podcidrs/"

// HostPrefix holds one store key per host of a cluster of several
// machines (podflow up --init/--join), by name; its value is a JSON
// record with the host's advertised address. Only the admin (the first
// server) writes it; node agents read it for their host-gw routes (a pod
// CIDR of a node on another host is routed via that host's address, and
// only via the address of a host recorded here).
const HostPrefix = "/registry/podflow/hosts/"

// MasterLeasePrefix holds one store key per live api replica address
// (kube-apiserver's /masterleases/): the kubernetes Service's endpoints
// (services/stages/kubernetesservice). Only the api stage writes it.
const MasterLeasePrefix = "/registry/podflow/masterleases/"

// RequestIDPrefix holds one store key per request id a stored pod holds
// (persistence.RequestIDKey); its value is a reference to that pod. The
// persistence stage creates it in the pod's own create transaction, on
// the condition that it does not exist yet, and deletes it once the pod
// is gone.
const RequestIDPrefix = "/registry/podflow/requestids/"

// storeWrites are the kinds each stage writes to the store. The api stage
// writes every kind (it applies users' objects), those registered at run
// time too (StoreWriteACL reads objects.Kinds for it); the others only
// what their step of the lifecycle records.
var storeWrites = map[string][]objects.Kind{
	API:            nil,
	Admission:      {objects.ResourceQuotas}, // quota admission charges status.used
	Persistence:    {objects.Pods, objects.Events},
	Scheduler:      {objects.Pods, objects.NodeAllocations, objects.Events},
	Status:         {objects.Pods, objects.Events, objects.Nodes, objects.NodeAllocations},
	Endpoints:      {objects.EndpointSlices, objects.Endpoints, objects.Events},
	ServiceAccount: {objects.ServiceAccounts, objects.Events},
	RootCACert:     {objects.ConfigMaps, objects.Events},
	// Workload controllers: their objects' status, their pods (adoption,
	// deletion), the Leases their replicas share the work with.
	ReplicaSet:            {objects.ReplicaSets, objects.Pods, objects.Events, objects.Leases},
	ReplicationController: {objects.ReplicationControllers, objects.Pods, objects.Events, objects.Leases},
	ResourceQuota:         {objects.ResourceQuotas, objects.Events},
	// Nodes' conditions and taints; pods' Ready, DisruptionTarget and
	// deletion (an eviction). Its leader election's Lease:
	// ControllerLeasePrefixes.
	NodeLifecycle: {objects.Nodes, objects.Pods, objects.Events},
	Job:           {objects.Jobs, objects.Pods, objects.Events, objects.Leases},
	CronJob:       {objects.CronJobs, objects.Jobs, objects.Pods, objects.Events, objects.Leases},
	// The Deployment controller: its ReplicaSets, its Deployments'
	// status (and a rollback's template), no pods.
	Deployment: {objects.Deployments, objects.ReplicaSets, objects.Events, objects.Leases},
	// The StatefulSet controller: its sets' status, their
	// ControllerRevisions, their pods (identity labels, adoption,
	// deletion).
	StatefulSet: {objects.StatefulSets, objects.ControllerRevisions, objects.Pods, objects.Events, objects.Leases},
	// The DaemonSet controller: its DaemonSets' status, their
	// ControllerRevisions, their pods (adoption, deletion).
	DaemonSet: {objects.DaemonSets, objects.ControllerRevisions, objects.Pods, objects.Events, objects.Leases},
	// The garbage collector: every kind (StoreWriteACL), custom
	// resources too; StoreWriteFilter lets it change only ownerReferences,
	// its own finalizers and deletion.
	GarbageCollector: nil,
	// The disruption controller: its PodDisruptionBudgets' status.
	Disruption: {objects.PodDisruptionBudgets, objects.Events, objects.Leases},
	// The TTL-after-finished controller: the finished Jobs it deletes.
	TTLAfterFinished: {objects.Jobs, objects.Events, objects.Leases},
}

// ControllerLeaseNamespace holds the controller stages' Leases: their
// replicas' (services/controller.Members) and the node lifecycle
// controller's leader election's, "podflow-nodelifecycle".
const ControllerLeaseNamespace = "kube-system"

// NodeLeaseNamespace holds one Lease per node, named after it: the node's
// heartbeat, renewed by its agent as kubelet's nodelease controller does.
const NodeLeaseNamespace = "kube-node-lease"

// nodeWrites: a node agent records Events and allocates its pod CIDR (the
// key is the CIDR; the value names the node); its Node and its Lease it
// writes alone.
var nodeWrites = []string{objects.Events.Prefix(""), PodCIDRPrefix}

// CustomResourceKey reports whether key is where kube-apiserver's layout
// keeps custom resources: /registry/<group>/<resource>/..., the group a
// DNS name with a dot (as every CustomResourceDefinition's group must be),
// the resource and the rest non-empty.
func CustomResourceKey(key string) bool {
	rest, ok := strings.CutPrefix(key, "/registry/")
	if !ok {
		return false
	}
	parts := strings.SplitN(rest, "/", 3)
	return len(parts) == 3 && strings.Contains(parts[0], ".") && parts[1] != "" && parts[2] != "" &&
		!strings.Contains(parts[2], "//") && !strings.HasPrefix(parts[0], ".")
}

// StoreWriteACL is the store's write policy (raftstore.Config.WriteACL):
// writer is the NATS user the write came from (the bus lets each user
// name only itself), key a key it writes. Stages write the kinds their
// step records (the api stage every kind, custom resources included:
// CustomResourceKey), a node agent its own Node (a simulated cluster any Node)
// and pod CIDRs (StoreWriteFilter: its own only), the store and unknown writers nothing. The admin writes
// unnamed and is not checked.
func StoreWriteACL(writer, key string) bool {
	var prefixes []string
	switch {
	case strings.HasPrefix(writer, "stage-"):
		kinds, ok := storeWrites[strings.TrimPrefix(writer, "stage-")]
		if !ok {
			return false
		}
		switch writer {
		case StageRole(API):
			kinds = objects.Kinds()                                                // ClusterIPs' reservations are IPAddresses
			prefixes = append(prefixes, MasterLeasePrefix, ipalloc.NodePortPrefix) // the replicas' leases of default/kubernetes, Services' node ports
			if CustomResourceKey(key) {
				return true // a CustomResourceDefinition's objects, which the store's process does not know
			}
		case StageRole(GarbageCollector):
			kinds = objects.Kinds() // kube's generic-garbage-collector may update and delete every resource
			if CustomResourceKey(key) {
				return true
			}
		case StageRole(Persistence):
			prefixes = append(prefixes, RequestIDPrefix)
		case StageRole(NodeLifecycle):
			// Its leader election's Lease, not the nodes' Leases of
			// kube-node-lease (a node's heartbeat is its own).
			if key == objects.Leases.Key(ControllerLeaseNamespace, "podflow-"+NodeLifecycle) {
				return true
			}
		}
		for _, k := range kinds {
			prefixes = append(prefixes, k.Prefix(""))
		}
	case strings.HasPrefix(writer, NodeRolePrefix):
		if name, ok := strings.CutPrefix(key, objects.Nodes.Prefix("")); ok {
			return NodeRole(name) == writer
		}
		if name, ok := strings.CutPrefix(key, objects.Leases.Prefix(NodeLeaseNamespace)); ok {
			return NodeRole(name) == writer
		}
		prefixes = nodeWrites
	case strings.HasPrefix(writer, SimNodesRolePrefix):
		// Simulated nodes take their pod CIDRs from their cluster's
		// configuration and record none: no record of theirs may steal a
		// real node's routes.
		prefixes = []string{objects.Nodes.Prefix(""), objects.Leases.Prefix(NodeLeaseNamespace), objects.Events.Prefix("")}
	}
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
