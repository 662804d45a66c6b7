// Package container runs one container process the way a CRI runtime does,
// without runc: a per-container shim (a re-exec of the calling binary in a
// helper mode, like conmon or containerd-shim) starts the container's init in
// a new mount namespace and new PID, UTS and IPC namespaces (or the host's:
// Spec.HostPID, HostUTS, HostIPC; or, PID, the pod's shared one held by
// a StartPIDNamespace holder: Spec.PIDNamespace), inside the pod's network namespace
// (Spec.NetnsPath; "" the host's) and cgroup, pivot_roots into the rootfs,
// mounts /proc, a minimal /dev and the volumes (a Mount.SubPath resolved
// under its source with openat2 RESOLVE_IN_ROOT and mounted through the
// resulting descriptor), writes Spec.Sysctls (namespaced ones only, never
// in a namespace of the host's), drops to the privileges of Spec.Security
// and execs the command. The shim lives in its own session, so
// it and the container survive the death of the agent that started them; it
// captures stdout and stderr into a log file in the Kubernetes CRI format
// ("<RFC3339Nano> stdout F <line>"), and records the exit (code, signal,
// OOM kill) in a state file. A restarted agent finds the container again
// with Open and learns of its exit through a pidfd of the shim, without
// being its parent.
//
// The rootfs is either a directory of its own (Spec.Rootfs) or, with
// Spec.Image, an overlay of a shared read-only image directory mounted by
// the init inside the container's mount namespace (nothing to unmount on
// the host). Spares keeps shims started ahead of need, so a start waits
// only for the init. Exec runs a command in a running container (probes)
// as runc exec does: a helper started in the init's PID, IPC, UTS and
// network namespaces and cgroups joins its mount namespace on a thread
// with its own filesystem attributes (unshare CLONE_FS, then setns), and
// drops to the container's Security exactly as the init did.
//
// Attach: the shim holds the container's stdio — the write end of its
// stdin pipe (Spec.Stdin) or the master of its pseudo-terminal (Spec.TTY)
// — and serves it on attach.sock in the container directory (bound and
// dialled through /proc/self/fd of the directory, so its length does not
// matter): Container.Attach gets the live output and writes stdin, from
// any process, also after the agent that started the container is gone.
// Spec.StdinOnce closes stdin when the first attach's stdin ends. At the
// container's exit the shim sends the rest of the output and an exit
// frame, half-closes and reads what the client still sends until it
// leaves (closing a unix socket with data unread would reset the client's
// read); an attach that ends without the exit frame was cut
// (ErrAttachCut).
//
// Privileges: Spec.Security (nil: DefaultSecurity, containerd's and
// runc's defaults) says what the process may do. The init applies it in
// one place, on the one thread that execs: masked and read-only /proc and
// /sys paths, a fresh /dev with only Security.Devices, the root remounted
// read-only if asked; then the user resolved in the container's
// /etc/passwd, every fd above 2 close-on-exec, rlimits, the bounding set
// dropped, setgroups/setresgid/setresuid with the permitted set kept
// across (PR_SET_KEEPCAPS), the permitted and effective sets (inheritable
// and ambient empty), no_new_privs, and the seccomp filter (compiled by
// CompileSeccomp) last — or, without no_new_privs, first, since loading it
// then needs CAP_SYS_ADMIN. The device cgroup denies every device but
// those: on cgroup v1 the shim places the init in a device cgroup of its
// own ("podflow-dev-<id>"; when the init exits the shim kills what is left
// in it, waits for those to exit and removes it); for a
// container placed in a cgroup v2 directory it attaches the same rules as
// an eBPF device program (containerd's cgroup2.DeviceFilter) to that
// directory before the init is cloned into it.
//
// Cgroup placement: when Spec.Cgroups holds a cgroup v2 directory (key ""),
// the init is cloned straight into it (clone3 CLONE_INTO_CGROUP); with cgroup
// v1 directories the init blocks on a pipe until the shim has written its
// pid into every hierarchy, then proceeds. Either way no instruction of the
// container's program runs outside its cgroup. Measured by BenchmarkStart
// (start to exit of `true`, shim and init included): about 36 ms with v2
// clone-into-cgroup against 43 ms with the v1 handshake on a loaded 2-core
// machine; the first v1 migration of a burst pays an RCU grace period
// (~12 ms), which CLONE_INTO_CGROUP avoids.
//
// Callers must:
//
//  1. Call RunHelper first thing in main (and in TestMain of tests that
//     start containers): in a re-exec'd shim or init it runs that role and
//     exits; otherwise it returns false at once.
//  2. Prepare the rootfs and the volume sources, then Start a Spec. Start
//     returns once the command has been exec'd (or failed to be).
//  3. Wait for the exit (Wait), or Stop the container; Close every
//     *Container (it stops its pidfd watcher; the process keeps running).
//  4. After an agent restart, Open the container directory again.
//
// Example:
//
//	func main() {
//		if container.RunHelper() {
//			return // never reached: the helper exits
//		}
//		c, err := container.Start(ctx, container.DefaultConfig(), container.Spec{
//			ID: "abc", Dir: dir, Rootfs: rootfs, LogPath: dir + "/0.log",
//			Args: []string{"sleep", "3600"}, Hostname: "web-0",
//			NetnsPath: "/run/netns/podflow-1234", Cgroups: map[string]string{"": cg},
//		})
//		...
//		st, err := c.Stop(ctx, 30*time.Second) // SIGTERM, SIGKILL after grace
//		c.Close()
//	}
package container
