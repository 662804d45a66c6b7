// Package linux is podflow's Linux node runtime: it implements
// nodeagent.Runtime with real kernel parts, as the kubelet's container
// runtime and CNI plugins do, but in-process and without runc or CNI
// binaries:
//
//   - RunPodSandbox: the pod's cgroup by QoS class (package cgroups), then a
//     network namespace with a veth pair and an IP from the node's pod CIDR
//     (package network).
//   - MountVolumes: emptyDir directories (a 0777 tmpfs of
//     VolumeData.MemorySize for medium Memory; VolumeUsage counts an
//     emptyDir as du does, for the agent's sizeLimit eviction),
//     configMap, secret, downwardAPI and projected files in kubelet's
//     atomic-writer layout (..data swapped in one rename on each refresh;
//     secrets, downwardAPI and projected on a 0755 tmpfs of
//     VolumeData.MemorySize, never on disk; modes from items, the stored
//     defaultMode (admission stores 0644), or for a pod stored without
//     one 0644 and 0400 for secrets; a projected volume's as the agent
//     resolved them, VolumeData.Modes), hostPath volumes only under
//     Config.HostPathPrefixes.
//   - PullImage and a fresh rootfs per container instance (package image);
//     PullImageWithSecrets (nodeagent.SecretPuller) pulls with the
//     credentials of the pod's imagePullSecrets.
//   - StartContainer: a fresh cgroup per instance and a process started by
//     a per-container shim in new mount, PID, UTS and IPC namespaces inside
//     the pod's network namespace (package container); with
//     shareProcessNamespace, in the pod's PID namespace, whose holder
//     RunPodSandbox starts and StopPodSandbox kills; stdout and stderr in
//     pods/<uid>/logs/<container>/<restart>.log (CRI format); a fresh
//     0666 file per instance bind-mounted at its terminationMessagePath,
//     read back for the termination message (TerminationMessage,
//     LogTail for FallbackToLogsOnError).
//   - Probe: exec in the container's namespaces; httpGet, tcpSocket and
//     grpc (grpc.health.v1, kubelet's messages) from the node to the pod IP.
//   - Meter (kubectl top): each Sample reads the node's cgroup root and
//     every running container's cgroup (cgroups.Manager.ContainerUsage:
//     cumulative CPU, working set = usage - inactive_file) and reports the
//     CPU rate since the previous Sample, kept per container instance, as
//     cAdvisor and metrics-server do.
//   - ReadLog (nodeagent.LogReader): a container instance's log, by
//     the instance the agent picked from the pod's status.
//   - ReleasePodSandbox (nodeagent.SandboxReleaser), for a finished pod:
//     kill, then remove mounts, cgroups, the network namespace, the veth
//     and the IP, the volumes and the containers' writable layers; the
//     containers' records and logs stay until RemovePodSandbox.
//   - StopPodSandbox and RemovePodSandbox: kill, then remove mounts,
//     cgroups, the network namespace, the veth and the IP, and the pod's
//     directory.
//   - The container's hostname is kubelet's (spec.hostname or the pod's
//     name, at most 63 characters), its /etc/hosts kubelet's managed
//     file (FQDN with spec.subdomain, hostAliases); seLinuxOptions label
//     its process where SELinux is enabled.
//
// The runtime is where pods meet the kernel libraries, which take plain
// data and return their own sentinel errors: PlanPod turns a pod spec into
// the cgroups.PodPlan the cgroup manager applies (QoS class and pod-level
// limits from proto/podrules), and agentError maps image.ErrPull, image.ErrNeverPull,
// image.ErrRootfs and network.ErrSandbox to the agent's codes
// (ErrImagePull, ErrImageNeverPull, CreateContainerError,
// FailedCreatePodSandBox).
//
// Everything is recorded under Config.DataDir: a new Runtime on the same
// directory (an agent restarted after SIGKILL) adopts the pods, whose
// containers kept running under their shims, with the same restart counts.
//
// One live Runtime per node name and per DataDir on a machine: New takes
// an flock on Config.LockDir/<node>.lock (default /run/podflow) and on
// DataDir/agent.lock, whose content records the holder's identity
// (InstanceOf(DataDir), DataDir, PID). Next to a live agent it refuses
// with ErrNodeInUse and touches nothing; over the pods of a stopped agent
// with another DataDir that still records them, with ErrForeignLeftovers.
// Otherwise recovery removes every kernel object of the node that DataDir
// does not record, killing the processes of such a pod first (none can
// adopt it; a failure is logged, never fatal), and Decommission
// removes the rest, checks with the kernel that nothing is left, and
// removes the lock file (nodelock.go).
//
// Callers must:
//
//  1. Call container.RunHelper first thing in main: the binary is re-exec'd
//     as each container's shim and init.
//  2. Build the Runtime with New(DefaultConfig(...)) as root; New refuses,
//     with ErrUnavailable, on a machine without root, cgroups or network
//     namespaces (use the simulated runtime, package sim, there).
//  3. Hand it to nodeagent.New; call Close when the agent stops (pods keep
//     running; the locks are released). Give two agents on one machine
//     different node names.
//
// Example:
//
//	func main() {
//		if container.RunHelper() {
//			return
//		}
//		rt, err := linux.New(linux.DefaultConfig("node-1", "10.244.1.0/24", "/var/lib/podflow/node-1", "127.0.0.1:5000"))
//		if err != nil {
//			log.Fatal(err) // "linux: runtime unavailable: needs root ... (use --runtime sim ...)"
//		}
//		defer rt.Close()
//		agent, err := nodeagent.New(nodeagent.DefaultConfig("node-1", "10.244.1.0/24"), rt, store, publisher)
//		...
//	}
package linux
