// Package csisanity configures csi-test's sanity suite one way for both of
// its runs: in process against the driver with fake OS layers (pkg/csi) and
// inside the VM against the real plugin (test/kernel/guest).
package csisanity

import (
	"os"
	"path/filepath"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// Config returns the suite's configuration for the plugin at endpoint, with
// mount paths under dir, volumes of volumeSize bytes and the given
// StorageClass parameters. Every call is made twice (idempotency). The
// suite's own CheckPath (os.Stat) tells it what a path is, as kubelet sees it.
func Config(endpoint, dir string, volumeSize int64, params map[string]string) sanity.TestConfig {
	cfg := sanity.NewTestConfig()
	cfg.Address = endpoint
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeSize = volumeSize
	cfg.TestVolumeExpandSize = 2 * volumeSize
	cfg.TestVolumeParameters = params
	cfg.IdempotentCount = 2
	cfg.CreateTargetDir = func(p string) (string, error) { return p, os.MkdirAll(p, 0o750) }
	cfg.CreateStagingDir = cfg.CreateTargetDir
	return cfg
}
