package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

var decodeSeeds = []string{
	`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\nspec:\n  containers:\n  - name: c\n    image: i\n",
	`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i","imagePullPolcy":"x"}]}}`,
	`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`,
	`[{"apiVersion":"v1","kind":"Pod"},{"apiVersion":"v1","kind":"Pod"}]`,
	"a: &a [*a]",
	"x: &a [1,1,1]\ny: &b [*a,*a,*a]\nz: [*b,*b,*b]",
	`{"apiVersion":"v1","kind":"Pod","spec":{"containers":"notalist"}}`,
	"k8s\x00garbage",
	"",
	"{",
	"\xff\xfe",
}

// FuzzDecodeObject feeds arbitrary bodies to the request decoding path:
// it must never panic, must return either an object of the resource's
// kind or a 4xx Status, and Strict must never accept what Warn warns
// about.
func FuzzDecodeObject(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	res := lookupResource("v1", "pods")
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []string{validationStrict, validationWarn, validationIgnore} {
			obj, warnings, st := decodeObject(body, res, v, 64<<10)
			if st != nil {
				if st.GetCode() < 400 || st.GetCode() >= 500 {
					t.Fatalf("%s: status %d for bad input: %v", v, st.GetCode(), st)
				}
				if obj != nil {
					t.Fatalf("%s: both an object and a status", v)
				}
				continue
			}
			if _, ok := obj.(*corev1.Pod); !ok {
				t.Fatalf("%s: decoded %T", v, obj)
			}
			if v == validationStrict && len(warnings) > 0 {
				t.Fatalf("strict accepted with warnings %v", warnings)
			}
			if v == validationIgnore && len(warnings) > 0 {
				t.Fatalf("ignore returned warnings %v", warnings)
			}
		}
		// The protobuf path must refuse junk with a Status, not a panic.
		r := httptest.NewRequest("POST", "/api/v1/namespaces/default/pods", nil)
		r.Header.Set("Content-Type", protobufContentType)
		if _, st := bodyJSON(r, body, kubeTypes["Pod"]); st != nil && st.GetCode() < 400 {
			t.Fatalf("protobuf: status %v", st)
		}
	})
}

// FuzzPatch applies arbitrary patches of every type to a pod: no panic,
// and a result is always JSON or a 4xx Status.
//
// Its corpus holds the hostile patches: a copy bomb (each copy doubles the
// object) and one operation past MaxJSONPatchOperations.
func FuzzPatch(f *testing.F) {
	for _, s := range []string{`{"metadata":{"labels":{"a":"b"}}}`, `[{"op":"add","path":"/metadata/labels/x","value":"y"}]`,
		`[{"op":"remove","path":"/spec/containers/0"}]`, `[{"op":"move","from":"/spec","path":"/spec/x"}]`, `{"spec":null}`, `null`, `[`,
		copyBomb(40), tooManyOps(MaxJSONPatchOperations + 1)} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(2)) // as a JSON patch
	}
	orig := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	types := []string{patchStrategic, patchMerge, patchJSON, patchApply}
	res := lookupResource("v1", "pods")
	f.Fuzz(func(t *testing.T, patch []byte, which uint8) {
		out, st := applyPatch(orig, patch, types[int(which)%len(types)], res, testPatchLimits)
		if st != nil {
			if st.GetCode() < 400 || st.GetCode() >= 500 {
				t.Fatalf("status %v", st)
			}
			return
		}
		if len(out) == 0 {
			t.Fatal("empty result")
		}
	})
}

func TestParseKeysPEM(t *testing.T) {
	t.Parallel()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(k.Public())
	keys, err := ParseKeys(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	if err != nil || len(keys) != 1 {
		t.Fatalf("ParseKeys: %v %v", keys, err)
	}
	priv, _ := x509.MarshalPKCS8PrivateKey(k)
	if _, err := ParseKeys(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv})); err == nil {
		t.Fatal("a file with only a private key was accepted")
	}
	if _, err := ParseKeys([]byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`)); err == nil || !strings.Contains(err.Error(), "not a public key") {
		t.Fatalf("a symmetric JWK was accepted: %v", err)
	}
}

func TestWantsTable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		accept string
		want   bool
	}{
		{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", true},
		{"application/json", false},
		{"application/json, application/json;as=Table;v=v1;g=meta.k8s.io", false},
		{"application/json;as=Table;v=v2;g=meta.k8s.io", false},
		{"", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", c.accept)
		if got := wantsTable(r); got != c.want {
			t.Errorf("wantsTable(%q) = %v", c.accept, got)
		}
	}
}

func TestMergePatch(t *testing.T) {
	t.Parallel()
	out, st := applyPatch([]byte(`{"a":{"b":1,"c":2},"d":[1]}`), []byte(`{"a":{"b":null,"e":3},"d":[2]}`), patchMerge, lookupResource("v1", "configmaps"), testPatchLimits)
	if st != nil || string(out) != `{"a":{"c":2,"e":3},"d":[2]}` {
		t.Fatalf("merge patch: %s %v", out, st)
	}
	out, st = applyPatch([]byte(`{"a":[1,2,3]}`), []byte(`[{"op":"add","path":"/a/1","value":9},{"op":"remove","path":"/a/0"},{"op":"test","path":"/a/0","value":9}]`), patchJSON, lookupResource("v1", "configmaps"), testPatchLimits)
	if st != nil || string(out) != `{"a":[9,2,3]}` {
		t.Fatalf("json patch: %s %v", out, st)
	}
	if _, st = applyPatch([]byte(`{"a":1}`), []byte(`[{"op":"test","path":"/a","value":2}]`), patchJSON, lookupResource("v1", "configmaps"), testPatchLimits); st == nil || st.GetCode() != 422 {
		t.Fatalf("failed test op: %v", st)
	}
}
