package manifest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	pf "github.com/podflow/podflow/proto/corev1"
)

// billionLaughs is the classic YAML alias bomb: ten levels of nine aliases,
// a billion "lol"s once expanded, under 1 KiB as written.
func billionLaughs() []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\ndata:\n")
	b.WriteString("  a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for _, c := range "bcdefghij" {
		fmt.Fprintf(&b, "  %c: &%c [", c, c)
		for i := 0; i < 9; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
		prev = string(c)
	}
	return []byte(b.String())
}

// wideBomb has few aliases per expanded node: three levels of 1000-wide
// lists, 10^9 nodes from 12 KiB.
func wideBomb() []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: c\n    args: &l1 [")
	b.WriteString(strings.Repeat("x,", 999) + "x]\n")
	for i, name := range []string{"l2", "l3"} {
		fmt.Fprintf(&b, "  - name: c%d\n    args: &%s [", i, name)
		b.WriteString(strings.Repeat(fmt.Sprintf("*l%d,", i+1), 999) + fmt.Sprintf("*l%d]\n", i+1))
	}
	return []byte(b.String())
}

// allocated runs f and returns the bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestAliasBombRefusedBeforeExpansion(t *testing.T) {
	for name, bomb := range map[string][]byte{"billion laughs": billionLaughs(), "wide": wideBomb()} {
		t.Run(name, func(t *testing.T) { refusesBomb(t, bomb) })
	}
}

func refusesBomb(t *testing.T, bomb []byte) {
	var err error
	// Expanding even a millionth of the bomb would allocate far more.
	if n := allocated(func() { _, err = Decode(bomb) }); n > 8<<20 {
		t.Errorf("refusing a %d-byte bomb allocated %d bytes", len(bomb), n)
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Decode(bomb) = %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "alias") {
		t.Errorf("error %q does not say aliases are the problem", err)
	}
}

func TestModestAliasesAccepted(t *testing.T) {
	objs, err := Decode([]byte(`
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: &labels {app: web, tier: front}
  annotations: *labels
spec:
  nodeSelector: *labels
  containers: [{name: c, image: "*not-an-alias*"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := objs[0].Message.ProtoReflect().Interface(); got == nil {
		t.Fatal("no message")
	}
}

func TestAliasLimitConfigurable(t *testing.T) {
	// Each alias of the three-node list [one, two] adds two nodes: four in all.
	doc := []byte("apiVersion: v1\nkind: Pod\nspec: {containers: [{name: a, args: &a [one, two]}, {name: b, args: *a}, {name: c, args: *a}]}\n")
	tests := []struct {
		limit int
		err   error
	}{{0, ErrTooLarge}, {3, ErrTooLarge}, {4, nil}}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxAliasNodes = tc.limit
			_, err := Decode(doc, WithConfig(cfg))
			if !errors.Is(err, tc.err) && !(tc.err == nil && err == nil) {
				t.Errorf("MaxAliasNodes=%d: Decode = %v, want %v", tc.limit, err, tc.err)
			}
		})
	}
}

func TestTooLargeRefusedBeforeParsing(t *testing.T) {
	// Over the limit by one byte, and not even YAML: only the size is looked at.
	data := make([]byte, DefaultConfig().MaxBytes+1)
	for i := range data {
		data[i] = '['
	}
	var err error
	if n := allocated(func() { _, err = Decode(data) }); n > 64<<10 {
		t.Errorf("refusing %d bytes allocated %d bytes", len(data), n)
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Decode = %v, want ErrTooLarge", err)
	}
	// Exactly at the limit it is parsed (and found malformed).
	if _, err := Decode(data[:len(data)-1]); errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrMalformed) {
		t.Errorf("Decode at the limit = %v, want ErrMalformed", err)
	}
}

func BenchmarkDecodeAliasBomb(b *testing.B) {
	bomb := wideBomb()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(bomb); !errors.Is(err, ErrTooLarge) {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTooLarge(b *testing.B) {
	data := make([]byte, DefaultConfig().MaxBytes+1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); !errors.Is(err, ErrTooLarge) {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSeedPod(b *testing.B) {
	data := readExample(b, "nginx-pod.yaml")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRichPod(b *testing.B) {
	data := []byte(richPod)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeRichPod(b *testing.B) {
	objs, err := Decode([]byte(richPod))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(objs[0].Message, FormatYAML); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLongFinalLine guards against apimachinery's YAMLReader dropping a
// final unterminated line whose length is a multiple of 4096 bytes.
func TestLongFinalLine(t *testing.T) {
	for _, size := range []int{4095, 4096, 8192} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			head := "apiVersion: v1\nkind: ConfigMap\n"
			prefix, suffix := "data: {a: ", "}"
			line := prefix + strings.Repeat("x", size-len(prefix)-len(suffix)) + suffix
			objs, err := Decode([]byte(head + line))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(objs[0].Message.(*pf.ConfigMap).GetData()["a"]); got != size-len(prefix)-len(suffix) {
				t.Errorf("data.a has %d bytes, want %d", got, size-len(prefix)-len(suffix))
			}
		})
	}
}
