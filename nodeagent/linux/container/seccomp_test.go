package container_test

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podflow/podflow/nodeagent/linux/container"
)

func TestCompileSeccomp(t *testing.T) {
	errno := uint(38)
	for _, tc := range []struct {
		name string
		prof *specs.LinuxSeccomp
		ok   bool
	}{
		{"nil: no filter", nil, true},
		{"errno default, allow list, unknown names skipped", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read", "write", "no_such_syscall"}, Action: specs.ActAllow},
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &errno},
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 0x7E020000, Op: specs.OpMaskedEqual}}},
		}}, true},
		{"masked-eq with a non-zero value", &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
			{Names: []string{"clone"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: 3, ValueTwo: 1, Op: specs.OpMaskedEqual}}},
		}}, false},
		{"notify is not supported", &specs.LinuxSeccomp{DefaultAction: specs.ActNotify}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := container.CompileSeccomp(tc.prof)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, container.ErrSeccomp) {
				t.Errorf("err = %v, want ErrSeccomp", err)
			}
			if tc.ok && (tc.prof == nil) != (f == nil) {
				t.Errorf("filter = %d instructions", len(f))
			}
		})
	}
}

// The runtime default compiles for every capability set podflow passes.
func TestRuntimeDefaultCompiles(t *testing.T) {
	for name, caps := range map[string][]string{"default": container.DefaultCapabilities, "none": nil, "all": container.AllCapabilities()} {
		t.Run(name, func(t *testing.T) {
			p, err := container.RuntimeDefaultSeccomp(caps)
			if err != nil {
				t.Fatal(err)
			}
			f, err := container.CompileSeccomp(p)
			if err != nil || len(f) < 100 {
				t.Fatalf("%d instructions, %v", len(f), err)
			}
		})
	}
}
