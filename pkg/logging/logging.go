// Package logging sets up the logs of the three binaries with the options of
// the Kubernetes components (k8s.io/component-base/logs): -v, -vmodule and
// --logging-format, text (klog's, the default) or json, as kubelet and the
// CSI sidecars take them, so one log pipeline parses them all.
package logging

import (
	"flag"

	logsapi "k8s.io/component-base/logs/api/v1"
	// Registers the json format with component-base's format registry.
	_ "k8s.io/component-base/logs/json/register"
)

// Options are the logging flags of one process.
type Options struct {
	config *logsapi.LoggingConfiguration
}

// AddFlags registers the logging flags on fs.
func AddFlags(fs *flag.FlagSet) *Options {
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c, fs)
	return &Options{config: c}
}

// Apply validates the parsed flags and installs the chosen logger behind
// klog; a process applies one configuration only.
func (o *Options) Apply() error {
	// A second Apply with the same flags (tests run a binary's run function
	// more than once per process) is a no-op instead of an error.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	// No feature gates: the formats and options that are on by default.
	return logsapi.ValidateAndApply(o.config, nil)
}

// Format is the chosen log format.
func (o *Options) Format() string { return o.config.Format }
