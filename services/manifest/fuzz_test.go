package manifest

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzDecode: Decode never panics, and every object it returns encodes (as
// YAML and as JSON) to a manifest that decodes to an equal message.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"nginx-pod.yaml", "nginx-service.yaml"} {
		f.Add(readExample(f, name))
	}
	f.Add([]byte(richPod))
	f.Add(billionLaughs())
	f.Add(wideBomb())
	for _, s := range []string{
		"",
		"---\n---\n",
		"apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, imagePullPolcy: x}]}\n",
		"apiVersion: v1\nkind: Pod\nkind: Pod\n",
		`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Secret","stringData":{"a":"b"}}]}`,
		`[{"apiVersion":"v1","kind":"Service","spec":{"ports":[{"port":1,"targetPort":"x"}]}}]`,
		"apiVersion: v1\nkind: Pod\nspec: {containers: [{name: p, livenessProbe: {tcpSocket: {port: 1e2}}}]}\n",
		"apiVersion: v1\nkind: Event\neventTime: 2026-01-01T00:00:00.123456Z\nmetadata: {creationTimestamp: 2026-01-01T00:00:00Z}\n",
		"a: [\n",
		"{\"apiVersion\": ",
		"- 1\n- 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode(data)
		if err != nil {
			return
		}
		for _, o := range objs {
			for _, format := range []Format{FormatYAML, FormatJSON} {
				out, err := Encode(o.Message, format)
				if err != nil {
					t.Fatalf("Encode(%s) of a decoded %s: %v", format, o.Kind, err)
				}
				again, err := Decode(out)
				if err != nil {
					t.Fatalf("re-Decode of %s:\n%s\n%v", format, out, err)
				}
				if len(again) != 1 || !proto.Equal(o.Message, again[0].Message) {
					t.Fatalf("%s round trip changed %s:\nbefore %v\nafter  %v\nencoded:\n%s", format, o.Kind, o.Message, again, out)
				}
			}
		}
	})
}
