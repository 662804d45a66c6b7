package nodeagent_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func messagePolicy(pol string) podOpt {
	return func(p *corev1.Pod) {
		for _, c := range p.Spec.Containers {
			c.TerminationMessagePolicy = pol
		}
	}
}

// logLines is n numbered log lines of width bytes each (newline included).
func logLines(n, width int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		l := fmt.Sprintf("line %d ", i)
		b.WriteString(l + strings.Repeat("x", width-len(l)-1) + "\n")
	}
	return b.String()
}

// terminated waits until the pod's first container has terminated (for
// good, restartPolicy Never) and returns its terminated state.
func (e *env) terminated(p *corev1.Pod) *corev1.ContainerStateTerminated {
	e.t.Helper()
	st := e.waitStatus(p.Metadata.Uid, "container terminated", func(st *corev1.PodStatus) bool {
		return st.GetPhase() == "Failed" || st.GetPhase() == "Succeeded"
	})
	return st.GetContainerStatuses()[0].GetState().GetTerminated()
}

// TestTerminationMessage: the terminated state's message is what the
// container wrote at its terminationMessagePath, or under
// FallbackToLogsOnError (failed, nothing written) the end of its log, with
// kubelet's limits: 4096 bytes of the file (its end), 80 lines and 2048
// bytes of the log, 12 KiB for the pod divided among its containers.
func TestTerminationMessage(t *testing.T) {
	exit := func(code string) podOpt {
		return annotate(sim.AnnotationExitAfter, "10ms", sim.AnnotationExitCode, code)
	}
	long := strings.Repeat("a", 1000) + strings.Repeat("b", nodeagent.MaxContainerTerminationMessageLength)
	tests := []struct {
		name string
		opts []podOpt
		want string
	}{
		{"File: what the container wrote", []podOpt{exit("1"), annotate(sim.AnnotationTerminationMessage, "disk full")}, "disk full"},
		{"File: the file's last 4096 bytes", []podOpt{exit("1"), annotate(sim.AnnotationTerminationMessage, long)},
			strings.Repeat("b", nodeagent.MaxContainerTerminationMessageLength)},
		{"File: never the log", []podOpt{exit("1"), annotate(sim.AnnotationLog, "boom\n")}, ""},
		{"FallbackToLogsOnError: the log when nothing was written", []podOpt{exit("1"), messagePolicy("FallbackToLogsOnError"),
			annotate(sim.AnnotationLog, "starting\npanic: boom\n")}, "starting\npanic: boom\n"},
		{"FallbackToLogsOnError: the file first", []podOpt{exit("1"), messagePolicy("FallbackToLogsOnError"),
			annotate(sim.AnnotationLog, "panic: boom\n", sim.AnnotationTerminationMessage, "written")}, "written"},
		{"FallbackToLogsOnError: not on success", []podOpt{exit("0"), messagePolicy("FallbackToLogsOnError"),
			annotate(sim.AnnotationLog, "done\n")}, ""},
		{"FallbackToLogsOnError: the last 80 lines", []podOpt{exit("1"), messagePolicy("FallbackToLogsOnError"),
			annotate(sim.AnnotationLog, logLines(100, 20))}, logLines(100, 20)[20*20:]},
		{"FallbackToLogsOnError: at most 2048 bytes", []podOpt{exit("1"), messagePolicy("FallbackToLogsOnError"),
			annotate(sim.AnnotationLog, logLines(50, 100))}, logLines(50, 100)[5000-2048:]},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := newPod("msg", append([]podOpt{restartPolicy("Never")}, tc.opts...)...)
			e.bind(p)
			if got := e.terminated(p).GetMessage(); got != tc.want {
				t.Errorf("message = %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
		})
	}

	t.Run("lastState after a restart", func(t *testing.T) {
		e := newEnv(t)
		p := newPod("msg-restart", restartPolicy("OnFailure"), exit("1"), annotate(sim.AnnotationTerminationMessage, "crashed"))
		e.bind(p)
		st := e.waitStatus(p.Metadata.Uid, "restarted", func(st *corev1.PodStatus) bool {
			return st.GetContainerStatuses()[0].GetLastTerminationState().GetTerminated() != nil
		})
		if got := st.GetContainerStatuses()[0].GetLastTerminationState().GetTerminated().GetMessage(); got != "crashed" {
			t.Errorf("lastState.terminated.message = %q, want %q", got, "crashed")
		}
	})

	t.Run("12 KiB for the pod", func(t *testing.T) {
		// Four containers with 4096 bytes each: 3072 bytes each in the status.
		e := newEnv(t)
		p := newPod("msg-pod", restartPolicy("Never"), exit("1"),
			annotate(sim.AnnotationTerminationMessage, strings.Repeat("m", nodeagent.MaxContainerTerminationMessageLength)))
		for _, n := range []string{"b", "c", "d"} {
			p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: n, Image: "nginx:1.27"})
		}
		e.bind(p)
		st := e.waitStatus(p.Metadata.Uid, "Failed", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Failed" })
		total := 0
		for _, cs := range st.GetContainerStatuses() {
			m := cs.GetState().GetTerminated().GetMessage()
			if len(m) != nodeagent.MaxPodTerminationMessageLength/4 {
				t.Errorf("%s: message of %d bytes, want %d", cs.GetName(), len(m), nodeagent.MaxPodTerminationMessageLength/4)
			}
			total += len(m)
		}
		if total > nodeagent.MaxPodTerminationMessageLength {
			t.Errorf("%d bytes of messages in the pod, over %d", total, nodeagent.MaxPodTerminationMessageLength)
		}
	})

	t.Run("valid UTF-8 when a limit cuts a rune", func(t *testing.T) {
		e := newEnv(t)
		// 4097 bytes: the file's last 4096 start inside the first "é".
		msg := "é" + strings.Repeat("z", nodeagent.MaxContainerTerminationMessageLength-1)
		p := newPod("msg-utf8", restartPolicy("Never"), exit("1"), annotate(sim.AnnotationTerminationMessage, msg))
		e.bind(p)
		if got, want := e.terminated(p).GetMessage(), strings.Repeat("z", nodeagent.MaxContainerTerminationMessageLength-1); got != want {
			t.Errorf("message = %q (%d bytes), want %d z", got, len(got), len(want))
		}
	})
}
