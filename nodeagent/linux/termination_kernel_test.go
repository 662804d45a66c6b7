package linux_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// runToTermination runs pd (restartPolicy Never) through an agent and
// returns its first container's terminated state.
func runToTermination(t *testing.T, e *env, pd *corev1.Pod) *corev1.ContainerStateTerminated {
	t.Helper()
	a, store, pub := runAgent(t, e)
	pd.Spec.RestartPolicy = "Never"
	store.PutPod(pd)
	ctx := ctxT(t, 60*time.Second)
	if err := a.HandlePodBound(ctx, pd); err != nil {
		t.Fatal(err)
	}
	uid := pd.Metadata.Uid
	var term *corev1.ContainerStateTerminated
	err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool {
		for _, x := range pub.Pod(uid) {
			if st := x.GetPodStatusReport().GetStatus(); st.GetPhase() == "Failed" || st.GetPhase() == "Succeeded" {
				term = st.GetContainerStatuses()[0].GetState().GetTerminated()
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.HandlePodDelete(ctx, pd, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := pub.Wait(ctx, func([]*eventsv1.Envelope) bool { return count(pub.Pod(uid), "PodDeleted") > 0 }); err != nil {
		t.Fatal(err)
	}
	return term
}

// A busybox container, run as a non-root user, writes its termination
// message to /dev/termination-log and exits 1: the terminated state
// carries it; a custom terminationMessagePath works the same.
func TestTerminationMessageFileOnTheKernel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, path string }{{"default path", ""}, {"custom path", "/tmp/why/msg"}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			target := tc.path
			if target == "" {
				target = "/dev/termination-log"
			}
			pd := newPod(e.cfg.NodeName, "termmsg", "sh", "-c", "echo starting; printf 'out of cheese' > "+target+"; exit 1")
			c := pd.Spec.Containers[0]
			c.TerminationMessagePath = tc.path
			uid := int64(1000)
			c.SecurityContext = &corev1.SecurityContext{RunAsUser: &uid}
			term := runToTermination(t, e, pd)
			if term.GetExitCode() != 1 || term.GetMessage() != "out of cheese" {
				t.Errorf("terminated = %v, want exit 1, message %q", term, "out of cheese")
			}
		})
	}
}

// FallbackToLogsOnError: a container that fails without writing its
// message gets the end of its log (here its last 80 of 100 lines).
func TestTerminationMessageFallbackToLogsOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pd := newPod(e.cfg.NodeName, "termlog", "sh", "-c", `i=1; while [ $i -le 100 ]; do echo "line $i"; i=$((i+1)); done; echo "panic: boom" >&2; exit 2`)
	pd.Spec.Containers[0].TerminationMessagePolicy = "FallbackToLogsOnError"
	term := runToTermination(t, e, pd)
	// stdout and stderr are two pipes, copied into the log apart: the
	// stderr line may be recorded anywhere among the stdout lines. The last
	// 80 lines are lines 22–100 and the panic line (in some order) when it
	// came among the last 80, else lines 21–100.
	got := strings.Split(strings.TrimSuffix(term.GetMessage(), "\n"), "\n")
	slices.Sort(got)
	var tails [][]string
	for _, extra := range []string{"panic: boom", "line 21"} {
		want := []string{extra}
		for i := 22; i <= 100; i++ {
			want = append(want, "line "+strconv.Itoa(i))
		}
		slices.Sort(want)
		tails = append(tails, want)
	}
	if term.GetExitCode() != 2 || !strings.HasSuffix(term.GetMessage(), "\n") || !slices.Equal(got, tails[0]) && !slices.Equal(got, tails[1]) {
		t.Errorf("terminated exit %d message %q, want exit 2 and the last 80 lines of the log", term.GetExitCode(), term.GetMessage())
	}
}
