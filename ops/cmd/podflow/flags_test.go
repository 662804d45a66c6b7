package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// eachFlag calls f for every flag every command of the podflow tree
// defines (its own and its persistent flags), with the command's path.
func eachFlag(f func(path string, fl *pflag.Flag)) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(fl *pflag.Flag) { f(c.CommandPath(), fl) }
		c.LocalNonPersistentFlags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}

// TestFlagUsageNamesNoType: no flag's usage holds a back-quoted word,
// which cobra would print as the flag's type ("--config podflow up").
func TestFlagUsageNamesNoType(t *testing.T) {
	eachFlag(func(path string, fl *pflag.Flag) {
		if strings.Contains(fl.Usage, "`") {
			name, _ := pflag.UnquoteUsage(fl)
			t.Errorf("%s --%s: usage %q shows as type %q in the help", path, fl.Name, fl.Usage, name)
		}
	})
}

// TestOneMeaningPerFlagName: a flag name has one type in every command
// that has it (--wait was a bool and a duration), and --replicas is
// always the replicas per stage (STAGE=N,...) of `podflow up` (it was
// also a count and a list of counts in the benchmarks); a renamed flag's
// old name stays as a hidden, deprecated alias that warns.
func TestOneMeaningPerFlagName(t *testing.T) {
	types := map[string]string{}
	where := map[string]string{}
	eachFlag(func(path string, fl *pflag.Flag) {
		if fl.Deprecated != "" {
			if !fl.Hidden {
				t.Errorf("%s --%s is deprecated but shown in the help", path, fl.Name)
			}
			return
		}
		// A repeatable flag (-f of apply) means what a single one does.
		typ := strings.TrimSuffix(strings.TrimSuffix(fl.Value.Type(), "Array"), "Slice")
		if seen, ok := types[fl.Name]; ok && seen != typ {
			t.Errorf("--%s is a %s in %q and a %s in %q", fl.Name, seen, where[fl.Name], typ, path)
		}
		types[fl.Name], where[fl.Name] = typ, path
		if fl.Name == "replicas" && !strings.Contains(fl.Usage, "admission=2") {
			t.Errorf("%s --replicas: %q is not the replicas per stage (STAGE=N,...)", path, fl.Usage)
		}
	})
	for _, tc := range []struct {
		args          []string
		flag, renamed string
		want          string
	}{
		{[]string{"bench", "scale", "--replicas", "1,3"}, "replica-counts", "replicas", "1,3"},
		{[]string{"bench", "scheduler", "--replicas", "4"}, "scheduler-replicas", "replicas", "4"},
		{[]string{"store", "status", "--wait", "2s"}, "timeout", "wait", "2s"},
		{[]string{"store", "run", "--join"}, "join-existing", "join", "true"}, // up --join ADDR joins a cluster
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			root := newRoot()
			cmd, rest, err := root.Find(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Flags().SetOutput(&stderr)
			if err := cmd.ParseFlags(rest); err != nil {
				t.Fatal(err)
			}
			if got := cmd.Flags().Lookup(tc.flag).Value.String(); got != tc.want {
				t.Errorf("--%s %s: --%s is %q, want %q", tc.renamed, tc.want, tc.flag, got, tc.want)
			}
			if want := "Flag --" + tc.renamed + " has been deprecated, use --" + tc.flag + " instead"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q, want the warning %q", stderr.String(), want)
			}
		})
	}
}
