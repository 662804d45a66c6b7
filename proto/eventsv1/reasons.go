package eventsv1

// Stable reason codes. They follow Kubernetes' names where Kubernetes has
// one, so its users recognise them in `podflow describe` and `podflow trace`.
const (
	// Rejections before persistence (PodRejected.status.reason).
	ReasonUnauthorized    = "Unauthorized"
	ReasonForbidden       = "Forbidden"
	ReasonInvalid         = "Invalid"
	ReasonPolicyViolation = "PolicyViolation"
	ReasonAlreadyExists   = "AlreadyExists"
	ReasonNotFound        = "NotFound"
	ReasonConflict        = "Conflict"
	ReasonTooManyRequests = "TooManyRequests"
	ReasonInternalError   = "InternalError"
	ReasonBadRequest      = "BadRequest"
	// ReasonServiceUnavailable: a stage cannot admit the pod now (its
	// webhook configurations lag the api stage's); the client may retry.
	ReasonServiceUnavailable = "ServiceUnavailable"

	// Scheduling.
	ReasonScheduled        = "Scheduled"
	ReasonUnschedulable    = "Unschedulable"
	ReasonFailedScheduling = "FailedScheduling"
	ReasonSchedulingGated  = "SchedulingGated"

	// Node side.
	ReasonPulling                = "Pulling"
	ReasonPulled                 = "Pulled"
	ReasonErrImagePull           = "ErrImagePull"
	ReasonImagePullBackOff       = "ImagePullBackOff"
	ReasonErrImageNeverPull      = "ErrImageNeverPull"
	ReasonFailedMount            = "FailedMount"
	ReasonFailedCreatePodSandBox = "FailedCreatePodSandBox"
	ReasonFailedKillPod          = "FailedKillPod" // the sandbox could not be torn down; retried
	ReasonContainerCreating      = "ContainerCreating"
	ReasonPodInitializing        = "PodInitializing"
	ReasonCreated                = "Created"
	ReasonStarted                = "Started"
	ReasonKilling                = "Killing"
	ReasonFailedPostStartHook    = "FailedPostStartHook"
	ReasonFailedPreStopHook      = "FailedPreStopHook"
	ReasonBackOff                = "BackOff"
	ReasonCrashLoopBackOff       = "CrashLoopBackOff"
	ReasonUnhealthy              = "Unhealthy"
	ReasonOOMKilled              = "OOMKilled"
	ReasonDeadlineExceeded       = "DeadlineExceeded" // spec.activeDeadlineSeconds passed: the pod is killed, Failed
	ReasonEvicted                = "Evicted"          // the kubelet's eviction manager (an emptyDir above its sizeLimit): killed, Failed
	ReasonCompleted              = "Completed"
	ReasonError                  = "Error"
	ReasonContainersNotReady     = "ContainersNotReady"
	ReasonNodeNotReady           = "NodeNotReady"
)
