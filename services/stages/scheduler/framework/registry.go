package framework

// PluginFactory builds a plugin for one Scheduler.
type PluginFactory func() (Plugin, error)

// Registry maps plugin names to their factories (kube-scheduler's
// runtime.Registry). A profile names plugins; the registry builds them.
type Registry map[string]PluginFactory
