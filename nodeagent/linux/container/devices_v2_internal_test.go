package container

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

// The program has one block per rule, the deny-all last (the generator
// checks rules from the last given), and returns 0 or 1 from each.
func TestDeviceProgramV2Generation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sec   Security
		rules int // allow blocks; 0 and no program for privileged
	}{
		{"default", DefaultSecurity(), len(allowedDevices) + len(DefaultDevices)},
		{"no devices", Security{}, len(allowedDevices)},
		{"privileged", Security{Privileged: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			insts, license, err := deviceProgramV2(tc.sec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rules == 0 {
				if insts != nil {
					t.Fatalf("privileged got a program:\n%v", insts)
				}
				return
			}
			if license == "" {
				t.Error("no license")
			}
			var allow, deny int
			for i, ins := range insts {
				if ins.OpCode.JumpOp() != asm.Exit {
					continue
				}
				switch prev := insts[i-1]; {
				case prev.Constant == 1:
					allow++
				case prev.Constant == 0:
					deny++
				}
			}
			if allow != tc.rules || deny != 1 {
				t.Errorf("program allows %d and denies %d times, want %d and 1:\n%v", allow, deny, tc.rules, insts)
			}
			if last := insts[len(insts)-2]; last.Constant != 0 {
				t.Errorf("the last rule is not deny-all:\n%v", insts)
			}
		})
	}
}
