// Package pipeline is the map of podflow's lifecycle: the stages, the
// events each consumes, and the streams and durable consumers that carry
// them. Provisioning reads it; every stage replica's runner is configured
// from it, so a stage's inputs are declared once.
//
//	client ─PodRequested→ api ─PodAuthorized→ admission ─PodAdmitted→ persistence ─PodPersisted→ scheduler
//	scheduler ─PodScheduled(node)→ nodeagent ─PodStatusReport→ status (writes the store)
//	nodeagent ─PodDeleted→ status (removes the pod), scheduler
//	store ─pod watch→ endpoints (a controller stage) ─EndpointsUpdated→ (the pod's trace)
//
// A stage that reacts to a node's report of a fact the status stage
// records (deleted) waits until the store reflects it — it retries the
// event until then — so every decision is taken on stored state. The
// endpoints stage consumes no events: it follows the pods the status
// stage writes through its pod watch, as kube's EndpointSlice controller
// follows its pod informer (the PodReady and PodNotReady a node reports
// travel inside its PodStatusReport, for the trace).
package pipeline

import (
	"fmt"
	"strings"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Stage names; each is also its durable consumer's name.
const (
	API         = "api"
	Admission   = "admission"
	Persistence = "persistence"
	Scheduler   = "scheduler"
	Status      = "status"
	// Controller stages (they consume no events: Controller).
	Endpoints      = "endpoints"      // Services' EndpointSlices, from a watch of pods
	ServiceAccount = "serviceaccount" // a "default" ServiceAccount in every namespace
	RootCACert     = "rootcacert"     // kube-root-ca.crt in every namespace
	// Workload controllers (services/controller): they create pods through
	// the api stage (ControllerPodsSubject) and write their objects.
	ReplicaSet            = "replicaset"            // ReplicaSets' pods
	ReplicationController = "replicationcontroller" // ReplicationControllers' pods
	ResourceQuota         = "resourcequota"         // every ResourceQuota's status.hard and status.used
	NodeLifecycle         = "nodelifecycle"         // nodes that stop heartbeating: taints, evictions
	Job                   = "job"                   // Jobs' pods, counted once each
	CronJob               = "cronjob"               // CronJobs' Jobs, on schedule
	// The Deployment controller makes and scales ReplicaSets, no pods.
	Deployment = "deployment"
	// The StatefulSet controller: ordinal pods, their ControllerRevisions.
	StatefulSet = "statefulset"
	// The DaemonSet controller: one pod of each DaemonSet per eligible node.
	DaemonSet = "daemonset"
	// The garbage collector deletes the dependents of deleted owners.
	GarbageCollector = "garbagecollector"
	// The disruption controller computes PodDisruptionBudgets' status.
	Disruption = "disruption"
	// TTLAfterFinished deletes finished Jobs once their
	// ttlSecondsAfterFinished ran out.
	TTLAfterFinished = "ttlafterfinished"
)

// Stages lists every stage in lifecycle order, then the controller stages.
var Stages = []string{API, Admission, Persistence, Scheduler, Status, Endpoints, ServiceAccount, RootCACert,
	ReplicaSet, ReplicationController, ResourceQuota, NodeLifecycle, Job, CronJob, Deployment, StatefulSet, DaemonSet, GarbageCollector, Disruption, TTLAfterFinished}

// Inputs are the event types each stage consumes; a controller stage
// consumes none.
var Inputs = map[string][]eventsv1.Type{
	API:                   {"PodRequested"},
	Admission:             {"PodAuthorized"},
	Persistence:           {"PodAdmitted"},
	Scheduler:             {"PodPersisted", "PodDeleted"},
	Status:                {"PodStatusReport", "PodDeleted"},
	Endpoints:             nil, // its pod watch drives it
	ServiceAccount:        nil,
	RootCACert:            nil,
	ReplicaSet:            nil,
	ReplicationController: nil,
	ResourceQuota:         nil,
	NodeLifecycle:         nil,
	Job:                   nil,
	CronJob:               nil,
	Deployment:            nil,
	StatefulSet:           nil,
	DaemonSet:             nil,
	GarbageCollector:      nil,
	Disruption:            nil,
	TTLAfterFinished:      nil,
}

// Controller reports whether stage is a controller stage: it consumes no
// events (no durable consumer), acting on the store from its own
// informers and reconcile (stage.Config.NoConsumer).
func Controller(stage string) bool {
	in, ok := Inputs[stage]
	return ok && len(in) == 0
}

// NodeAgentInputs are the event types a node agent consumes, addressed to
// its node.
var NodeAgentInputs = []eventsv1.Type{"PodScheduled", "PodDeleteRequested"}

// Subjects of the request-reply front door (never captured by a stream).
const (
	// CreatePodSubject takes a PodRequested (request-reply); the reply is
	// an apiv1.Response.
	CreatePodSubject = bus.APIPrefix + ".pods.create"
	// ObjectSubject takes an apiv1.ObjectRequest (apply, delete of any
	// kind, pod deletion included).
	ObjectSubject = bus.APIPrefix + ".objects"
	// ControllerPodsPrefix: a controller stage asks the api stage for a
	// pod on ControllerPodsPrefix.<stage> (ControllerPodsSubject).
	ControllerPodsPrefix = "podflow.ops.pods"
)

// ControllerPodsSubject is where the controller stage asks the api stage
// to create a pod: request-reply of an eventsv1.Envelope holding a
// PodRequested; the answer is the request's apiv1.Response. Only the
// stage's bus identity may publish there and only the api stage
// subscribes, so the subject names the controller as the bus
// authenticated it, as TokenPrefix names a node: the api stage gives the
// request the controller's Kubernetes identity (ControllerUser).
func ControllerPodsSubject(stage string) string { return ControllerPodsPrefix + "." + stage }

// controllerAccounts are the ServiceAccounts of kube-system whose
// identity each workload controller stage acts with, as
// kube-controller-manager's controllers with
// --use-service-account-credentials.
var controllerAccounts = map[string]string{
	ReplicaSet:            "replicaset-controller",
	ReplicationController: "replication-controller",
	Job:                   "job-controller",
	CronJob:               "cronjob-controller",
	Deployment:            "deployment-controller",
	StatefulSet:           "statefulset-controller",
	DaemonSet:             "daemon-set-controller",
	GarbageCollector:      "generic-garbage-collector",
	Disruption:            "disruption-controller",
	TTLAfterFinished:      "ttl-after-finished-controller",
}

// podMakers are the workload controllers that create pods (through
// ControllerPodsSubject); the others act on the store only.
var podMakers = map[string]bool{ReplicaSet: true, ReplicationController: true, Job: true, StatefulSet: true, DaemonSet: true}

// MakesPods reports whether a workload controller stage creates pods.
func MakesPods(stage string) bool { return podMakers[stage] }

// ControllerAccount is the kube-system ServiceAccount name a controller
// stage acts as ("" for a stage that is not a workload controller).
func ControllerAccount(stage string) string { return controllerAccounts[stage] }

// ControllerUser is the user a controller stage's pod requests are made
// as: its ServiceAccount's (system:serviceaccount:kube-system:NAME, in the
// groups system:serviceaccounts, system:serviceaccounts:kube-system and
// system:authenticated); nil for a stage that is not a workload
// controller.
func ControllerUser(stage string) *corev1.UserInfo {
	sa := controllerAccounts[stage]
	if sa == "" {
		return nil
	}
	return &corev1.UserInfo{Username: "system:serviceaccount:kube-system:" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
}

// ControllerOfUser is the controller stage whose identity username is
// (ControllerUser), if any.
func ControllerOfUser(username string) (string, bool) {
	sa, ok := strings.CutPrefix(username, "system:serviceaccount:kube-system:")
	if !ok {
		return "", false
	}
	for stage, name := range controllerAccounts {
		if name == sa {
			return stage, true
		}
	}
	return "", false
}

// Known reports whether name is a stage.
func Known(name string) bool {
	_, ok := Inputs[name]
	return ok
}

// Handlers in flight per replica, and delivered-not-acked messages per
// consumer, of every stage and of the simulated nodes. Every stage is bound
// by its handlers' latency, not their CPU: a handler holds its slot
// through the publish of its output (until the PubAck) and the confirmed
// ack, two round trips through a JetStream server that queues under load,
// so a replica's throughput is at most stageConcurrency divided by that
// time, however cheap the handler. At 64, the api and admission stages
// (10 µs of work per pod) capped the pipeline near 900 pods/s whenever the
// round trips reached ~70 ms. MaxAckPending leaves room for replicas.
const (
	stageConcurrency   = 256
	stageMaxAckPending = 8192
)

// RunnerConfig returns the runner configuration of one replica of stage.
func RunnerConfig(stage, replica string) (bus.RunnerConfig, error) {
	in, ok := Inputs[stage]
	if !ok {
		return bus.RunnerConfig{}, fmt.Errorf("pipeline: unknown stage %q", stage)
	}
	cfg := bus.DefaultRunnerConfig(stage)
	if replica != "" {
		cfg.Replica = replica
	}
	for _, t := range in {
		cfg.FilterSubjects = append(cfg.FilterSubjects, bus.TypeFilter(t))
	}
	cfg.Concurrency, cfg.MaxAckPending = stageConcurrency, stageMaxAckPending
	cfg.MaxDeliver = 10
	cfg.Backoff = []time.Duration{50 * time.Millisecond, 200 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}
	return cfg, nil
}

// NodeAgentRunnerConfig returns the runner configuration of the node agent
// of node (durable consumer "nodeagent-<node>").
func NodeAgentRunnerConfig(node string) bus.RunnerConfig {
	cfg := bus.DefaultRunnerConfig("nodeagent")
	cfg.Consumer = "nodeagent-" + bus.EncodeToken(node)
	cfg.Replica = node
	for _, t := range NodeAgentInputs {
		cfg.FilterSubjects = append(cfg.FilterSubjects, bus.TypeNodeFilter(t, node))
	}
	cfg.MaxDeliver = 10
	return cfg
}

// SimNodesRunnerConfig returns the runner configuration of a simulated
// cluster: one consumer for the inputs of every node, dispatched in
// process, so that thousands of simulated nodes need no consumer each.
func SimNodesRunnerConfig(name string) bus.RunnerConfig {
	cfg := bus.DefaultRunnerConfig("nodeagent")
	cfg.Consumer = "nodeagent-sim-" + bus.EncodeToken(name)
	cfg.Replica = name
	for _, t := range NodeAgentInputs {
		cfg.FilterSubjects = append(cfg.FilterSubjects, bus.TypeFilter(t))
	}
	cfg.Concurrency, cfg.MaxAckPending = stageConcurrency, stageMaxAckPending
	cfg.MaxDeliver = 10
	return cfg
}

// Topology returns the streams and every stage's consumer.
func Topology(streams bus.StreamsConfig) (bus.Topology, error) {
	t := bus.Topology{Streams: bus.DefaultStreams(streams)}
	for _, s := range Stages {
		if Controller(s) {
			continue // no consumer
		}
		cfg, err := RunnerConfig(s, "")
		if err != nil {
			return t, err
		}
		t.Consumers = append(t.Consumers, cfg.ConsumerSpecs()...)
	}
	return t, t.Validate()
}
