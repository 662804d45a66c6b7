package main

import "testing"

// TestBenchScaleCommandFlags: the command's flags reach the options (the
// defaults of the brief's run).
func TestBenchScaleCommandFlags(t *testing.T) {
	cmd := newBenchScaleCmd()
	if err := cmd.ParseFlags([]string{"--stage", "status", "--replicas", "1,3", "--stage-cpu", "0.5", "--pods", "20"}); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	if get("stage") != "status" || get("replicas") != "1,3" || get("stage-cpu") != "0.5" || get("pods") != "20" || get("rate") != "1200" || get("runs") != "3" {
		t.Fatalf("flags: stage %s replicas %s stage-cpu %s pods %s rate %s runs %s", get("stage"), get("replicas"), get("stage-cpu"), get("pods"), get("rate"), get("runs"))
	}
}

// TestBenchPipelineTokenVolumeFlag: the pods mount a token volume unless
// --token-volume=false.
func TestBenchPipelineTokenVolumeFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "true"},
		{[]string{"--token-volume=false"}, "false"},
	} {
		cmd := newBenchPipelineCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("token-volume").Value.String(); got != tc.want {
			t.Errorf("%v: --token-volume %s, want %s", tc.args, got, tc.want)
		}
	}
}
