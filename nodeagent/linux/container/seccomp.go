package container

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ErrSeccomp wraps every failure to build a seccomp filter.
var ErrSeccomp = errors.New("container: seccomp profile")

// RuntimeDefaultSeccomp is the container runtime's default profile (moby's
// default.json, as containerd's RuntimeDefault) for a container with the
// given bounding capabilities: rules conditioned on a capability (e.g.
// CAP_SYS_ADMIN lets clone create namespaces) follow caps.
func RuntimeDefaultSeccomp(caps []string) (*specs.LinuxSeccomp, error) {
	p, err := seccomp.GetDefaultProfile(capSpec(caps))
	if err != nil {
		return nil, fmt.Errorf("%w: RuntimeDefault: %w", ErrSeccomp, err)
	}
	return p, nil
}

// LoadSeccompProfile reads a profile in docker's JSON format (what
// kubelet's Localhost profiles are) for a container with caps.
func LoadSeccompProfile(path string, caps []string) (*specs.LinuxSeccomp, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	p, err := seccomp.LoadProfile(string(b), capSpec(caps))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrSeccomp, path, err)
	}
	return p, nil
}

func capSpec(caps []string) *specs.Spec {
	return &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps}}}
}

// CompileSeccomp compiles an OCI seccomp profile to a BPF filter for this
// machine's architecture with elastic/go-seccomp-bpf (pure Go, no
// libseccomp). Syscalls the architecture does not have are skipped, as
// libseccomp does; calls from other architectures (e.g. 32-bit x86 on
// amd64) and the x32 ABI get the default action, so a multi-arch profile
// is applied only to the native one. A nil profile compiles to nil.
func CompileSeccomp(p *specs.LinuxSeccomp) ([]unix.SockFilter, error) {
	if p == nil {
		return nil, nil
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	def, err := seccompAction(p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	if def != seccompbpf.ActionAllow && def != seccompbpf.ActionErrno && def != seccompbpf.ActionKillProcess &&
		def != seccompbpf.ActionKillThread && def != seccompbpf.ActionTrap && def != seccompbpf.ActionLog {
		return nil, fmt.Errorf("%w: default action %s with errno %d is not supported", ErrSeccomp, p.DefaultAction, def&unix.SECCOMP_RET_DATA)
	}
	policy := seccompbpf.Policy{DefaultAction: def}
	for i, rule := range p.Syscalls {
		act, err := seccompAction(rule.Action, rule.ErrnoRet)
		if err != nil {
			return nil, err
		}
		conds, err := seccompConditions(rule.Args)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %d (%v): %w", ErrSeccomp, i, rule.Names, err)
		}
		g := seccompbpf.SyscallGroup{Action: act}
		for _, name := range rule.Names {
			if _, ok := info.SyscallNames[name]; !ok {
				continue
			}
			if conds == nil {
				g.Names = append(g.Names, name)
			} else {
				g.NamesWithCondtions = append(g.NamesWithCondtions, seccompbpf.NameWithConditions{Name: name, Conditions: conds})
			}
		}
		if len(g.Names)+len(g.NamesWithCondtions) > 0 {
			policy.Syscalls = append(policy.Syscalls, g)
		}
	}
	if len(policy.Syscalls) == 0 { // Validate wants one group: a no-op one
		policy.Syscalls = []seccompbpf.SyscallGroup{{Names: []string{"getpid"}, Action: def}}
	}
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSeccomp, err)
	}
	if len(raw) > 4096 { // BPF_MAXINSNS
		return nil, fmt.Errorf("%w: %d instructions, more than the kernel's 4096", ErrSeccomp, len(raw))
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// seccompAction maps an OCI action (and errno) to a seccomp return value.
func seccompAction(a specs.LinuxSeccompAction, errno *uint) (seccompbpf.Action, error) {
	switch a {
	case specs.ActAllow:
		return seccompbpf.ActionAllow, nil
	case specs.ActErrno:
		if errno == nil || *errno == uint(unix.EPERM) {
			return seccompbpf.ActionErrno, nil // EPERM is added by the assembler
		}
		return seccompbpf.ActionErrno | seccompbpf.Action(*errno&unix.SECCOMP_RET_DATA), nil
	case specs.ActKill, specs.ActKillThread:
		return seccompbpf.ActionKillThread, nil
	case specs.ActKillProcess:
		return seccompbpf.ActionKillProcess, nil
	case specs.ActTrap:
		return seccompbpf.ActionTrap, nil
	case specs.ActLog:
		return seccompbpf.ActionLog, nil
	case specs.ActTrace:
		if errno == nil {
			return seccompbpf.ActionTrace | seccompbpf.Action(unix.EPERM), nil
		}
		return seccompbpf.ActionTrace | seccompbpf.Action(*errno&unix.SECCOMP_RET_DATA), nil
	}
	return 0, fmt.Errorf("%w: action %q is not supported", ErrSeccomp, a)
}

// seccompConditions maps a rule's argument comparisons (all must hold).
func seccompConditions(args []specs.LinuxSeccompArg) (seccompbpf.ArgumentConditions, error) {
	if len(args) == 0 {
		return nil, nil
	}
	var out seccompbpf.ArgumentConditions
	for _, a := range args {
		c := seccompbpf.Condition{Argument: uint32(a.Index), Value: a.Value}
		switch a.Op {
		case specs.OpEqualTo:
			c.Operation = seccompbpf.Equal
		case specs.OpNotEqual:
			c.Operation = seccompbpf.NotEqual
		case specs.OpLessThan:
			c.Operation = seccompbpf.LessThan
		case specs.OpLessEqual:
			c.Operation = seccompbpf.LessOrEqual
		case specs.OpGreaterThan:
			c.Operation = seccompbpf.GreaterThan
		case specs.OpGreaterEqual:
			c.Operation = seccompbpf.GreaterOrEqual
		case specs.OpMaskedEqual:
			// (arg & value) == valueTwo: only "no bit of the mask set"
			// (valueTwo 0), the form runtime profiles use, has a BPF
			// counterpart in the assembler.
			if a.ValueTwo != 0 {
				return nil, fmt.Errorf("SCMP_CMP_MASKED_EQ with a non-zero value (%#x) is not supported", a.ValueTwo)
			}
			c.Operation = seccompbpf.BitsNotSet
		default:
			return nil, fmt.Errorf("comparison %q is not supported", a.Op)
		}
		out = append(out, c)
	}
	return out, nil
}

// loadSeccomp installs filter on the calling thread (the one that execs).
// Without no_new_privs it needs CAP_SYS_ADMIN, so the init loads it before
// dropping capabilities then.
func loadSeccomp(filter []unix.SockFilter) error {
	if len(filter) == 0 {
		return nil
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("load seccomp filter: %w", e)
	}
	return nil
}
