package bench

// The long help of each `podflow bench` command: what the benchmark does
// and what it reports, kept beside the code that does it.

// SchedulerHelp is the help of `podflow bench scheduler` (RunScheduler).
const SchedulerHelp = `Run in this process an embedded NATS JetStream server and a raftstore
cluster on loopback (in a temporary directory, removed afterwards), write
--nodes Ready nodes and --pods pending pods to the store, start --scheduler-replicas
scheduler replicas, then publish a PodPersisted for every pod as fast as the
bus takes them and measure until every pod is bound: the rate (pods/s), the
filter, score and bind-commit times the PodScheduled events carry (p50, p99),
the lost bind races, and where the scheduling time went: each plugin's mean
time at each extension point over the sampled cycles (kube-scheduler's
scheduler_plugin_execution_duration_seconds, 10% of the cycles) with its
share, and the plugins' estimated time over all cycles as a share of the
process's cpu (wall times: on a busy machine an upper bound; --cpuprofile
for the rest: bus, store, GC). The shape of kube-scheduler's scheduler_perf
SchedulingBasic by default (nodes of 4 cpu, 32Gi, 110 pods; pods of 100m,
500Mi). --shape picks another of scheduler_perf's shapes; its --init-pods
(default: the shape's) are scheduled first, unmeasured:

  basic                no init pods (SchedulingBasic)
  topology-spreading   nodes over zones moon-1..3; init pods as basic, then
                       pods labelled color=blue with maxSkew 5 DoNotSchedule
                       on topology.kubernetes.io/zone (TopologySpreading;
                       scheduler_perf: 5000 nodes, 5000 init, 5000 pods)
  anti-affinity        init pods and pods labelled color=green with required
                       anti-affinity to color=green on the hostname
                       (SchedulingPodAntiAffinity: 5000 nodes, 1000 + 1000)
  preemption           init pods of priority 10 and 900m cpu fill the nodes,
                       pods of priority 100 and 3 cpu each preempt three
                       (PreemptionBasic: 500 nodes, 2000 init, 500 pods); a
                       stand-in for the node agents deletes the victims

Finally it checks that no pod was bound twice and no node overcommitted, and
the topology rules and preemption invariants, from the store's history.`

// PipelineHelp is the help of `podflow bench pipeline` (RunPipeline).
const PipelineHelp = `Offer a steady load of PodRequested events (--rate per second, --pods in all)
to a podflow system with simulated nodes and report the throughput, the
PodRequested→Running latency (p50, p99) and, per stage, the time events
waited in the stream and the time the stage spent handling them — all
rebuilt from the JetStream stream alone. It ends with the cost per pod,
counted by the system itself: the CPU time of every process (from
/proc/<pid>/stat of the processes in children.json, and up's), the
JetStream messages stored, deliveries and acks (the NATS server's stream
and consumer counters), the store requests, raft log entries and fsyncs and
the watch events delivered (each store replica's status counters), from
the first request until every consumer has drained. It works on the
configured system (--config, else $PODFLOW_CONFIG, ./.podflow/config.json,
~/.podflow/config.json, as every command); with --own, or when none is
configured, it starts its own ` + "`podflow up`" + ` in a temporary directory (3 store
replicas, --nodes simulated nodes) and stops it afterwards. It says which,
and prints its progress while it waits.

The pods keep Kubernetes' default automountServiceAccountToken: each mounts
a projected volume with a bound token of its ServiceAccount and the
kube-root-ca.crt ConfigMap, so the node asks the api stage for a token per
pod. --token-volume=false sets automountServiceAccountToken to false.

With --slo a second pass follows, as a client of the Kubernetes API sees
the system: --slo-pods pods created with stock client-go through the HTTPS
API at --slo-rate per second (default: 80% of the pods/s the first pass
reached, so offer the first pass more than the system takes), watched by a
client-go informer until Running, then deleted at the same rate. It prints
Kubernetes' scalability SLOs beside their limits: mutating API call latency
(POST and DELETE pods, each call's round trip, p99 ≤ 1s) and pod startup
latency (from sending the create to the watch seeing the pod Running, p99
≤ 5s).`

// ScaleHelp is the help of `podflow bench scale` (RunScale).
const ScaleHelp = `Run the whole system (as ` + "`podflow bench pipeline`" + ` does: its own ` + "`podflow up`" + `
with simulated nodes) once per replica count of --stage, alternating the
counts for --runs rounds, and bound every replica of that stage to
--stage-cpu CPUs in a cgroup of its own (podflow-bench-scale-<pid>/<replica>,
cgroup v2 cpu.max or v1 cpu.cfs_quota_us; removed at the end, also on
failure or interrupt). With one replica bounded the stage is the
bottleneck; a second gets as much CPU again, so the table shows what
adding a replica of the saturated stage buys when CPU is available.

Per run: pods/s, the stage's CPU ms per pod (all its replicas, from
/proc), the share of CFS periods its bound throttled, and its durable
consumer's pending and ack pending sampled during the run (what
` + "`podflow streams`" + ` shows); then the medians per replica count and every
consumer's peak pending. Needs root and a cgroup cpu controller; skips
otherwise.`
