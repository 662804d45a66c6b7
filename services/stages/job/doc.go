// Package job is the Job controller stage (batch/v1 Job), kube's
// pkg/controller/job built on services/controller: it creates a Job's pods
// through the pipeline (PodRequested, admission, persistence: the same
// trace and limits as a user's pod), counts their outcomes, and writes the
// Job's status and conditions.
//
// # What it does, as kube-controller-manager does
//
//   - completions and parallelism: at most parallelism pods run, never
//     more than the completions still needed; a Job without completions
//     is done when one pod succeeded and none runs.
//   - completionMode Indexed: one index per completion, in the pod's
//     annotation and label batch.kubernetes.io/job-completion-index, its
//     JOB_COMPLETION_INDEX environment variable and its hostname
//     <job>-<index>; status.completedIndexes lists the succeeded ones,
//     an index succeeding twice counts once.
//   - backoffLimit: the Job fails (FailureTarget, then Failed, reason
//     BackoffLimitExceeded) once more pods failed than it allows; after a
//     failure the next pod waits 10s, doubling per failure since the last
//     success, at most 6 minutes (Config.BackoffBase, BackoffMax).
//   - activeDeadlineSeconds: reason DeadlineExceeded.
//   - suspend: active pods are deleted, condition Suspended True
//     (JobSuspended); resuming sets it False (JobResumed) and restarts the
//     clock of activeDeadlineSeconds.
//   - success: condition SuccessCriteriaMet (CompletionsReached), then
//     Complete with completionTime once no pod runs and every finished pod
//     is counted — what `kubectl wait --for=condition=complete` waits for.
//   - adoption of orphans matching the selector and release of pods that
//     stopped matching (controller.ClaimOf).
//
// Not done (yet): podFailurePolicy, successPolicy, backoffLimitPerIndex,
// podReplacementPolicy and ttlSecondsAfterFinished are stored and served
// but the controller does not act on them; a Job using the first three is
// run as if they were unset.
//
// # Every finished pod counted exactly once
//
// Each pod is created with the finalizer batch.kubernetes.io/job-tracking,
// and a finished pod moves through three durable steps, as kube's
// trackJobStatusAndRemoveFinalizers:
//
//  1. its uid is added to status.uncountedTerminatedPods (a write of the
//     Job compared on its revision);
//  2. its finalizer is removed (a write of the pod compared on its
//     revision);
//  3. its uid leaves uncountedTerminatedPods and status.succeeded or
//     status.failed grows by one, in one write of the Job.
//
// Step 1 only takes a pod that still has the finalizer, step 3 only a uid
// whose pod lost it (or is gone), and a finalizer never comes back; the
// Job's writes are compare-and-swap, so two replicas (a handover) cannot
// both count. The one stale read that could count twice — a Job whose
// counters already hold a uid read with a pod informer that does not yet
// show the pod's finalizer removed — is ruled out by reading such a pod
// fresh from the store whenever the pod informer is behind the Job's
// revision (the removal precedes the count, so a read after the Job's
// shows it). A replica killed between any two steps leaves a state the
// next owner finishes.
//
// The store does not yet hold a pod with finalizers back from deletion:
// a finished pod deleted by a user before step 1 is not counted.
package job
