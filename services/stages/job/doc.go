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
//   - podFailurePolicy: a failed pod matching a FailJob rule fails the Job
//     (FailureTarget, then Failed, reason PodFailurePolicy, kube's
//     message); one matching Ignore is let go without being counted; Count
//     counts it; FailIndex fails its index. The rules are kube's pure
//     functions (policy.go, copied from pkg/controller/job).
//   - podReplacementPolicy Failed (the default with a podFailurePolicy): a
//     terminating pod is neither failed nor replaced until it is Failed.
//   - successPolicy (Indexed): the first rule of succeededIndexes or
//     succeededCount met is SuccessCriteriaMet, reason SuccessPolicy; the
//     running pods are deleted, then Complete.
//   - backoffLimitPerIndex and maxFailedIndexes (Indexed): each pod of an
//     index carries the index's failure counts in the annotations
//     batch.kubernetes.io/job-index-failure-count and
//     job-index-ignored-failure-count; a failed pod keeps its finalizer (is
//     not counted yet) until its replacement exists, so the count is
//     carried on; an index past its limit (or failing a FailIndex rule)
//     enters status.failedIndexes, written before its pod's finalizer is
//     removed; each index waits its own backoff. The Job fails with
//     MaxFailedIndexesExceeded, or FailedIndexes once every index ended.
//
// The order of the ends is kube's: an earlier SuccessCriteriaMet or
// FailureTarget, a FailJob rule, backoffLimit, activeDeadlineSeconds,
// maxFailedIndexes and failed indexes, successPolicy, completions.
//
//   - restartPolicy OnFailure: the restarts of the running pods'
//     containers count against backoffLimit (kube's
//     pastBackoffLimitOnFailure).
//
// ttlSecondsAfterFinished is the ttlafterfinished stage's.
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
// both count. The Job and its pods come from two informers, either of
// which can be behind the other, and three stale reads could count a pod
// twice or make one too many; each is ruled out by asking the store
// whenever the pod informer's revision (read before its pods) is behind
// the Job's:
//
//   - a Job whose counters already hold a uid, with a pod that does not
//     yet show its finalizer removed: such a pod is read fresh before
//     step 1 (the removal precedes the count);
//   - an uncounted uid whose pod the informer does not show yet: step 3
//     would take it for a pod gone; the namespace's pods are listed
//     fresh instead;
//   - an active pod that finished, and was counted, by the Job's
//     revision: a pod to delete is recorded as failed only if the store
//     still shows it running.
//
// And a Job informer behind the pods (a pod already let go by a status
// this copy does not show) would look like a free slot: pods are
// created only after a read of the Job as stored finds the same
// revision. A replica killed between any two steps leaves a state the
// next owner finishes.
//
// A pod deleted before step 1 is held by its finalizer: once its node is
// done the status stage keeps it (stage.HoldForFinalizers: grace 0,
// Failed unless it Succeeded), and step 2 deletes it
// (stage.RemovePodFinalizer), so it is counted like any other.
package job
