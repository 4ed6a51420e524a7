package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSchemaRefusesBadValues: values.schema.json stops mistakes at install time,
// before a node plugin would refuse them at start-up.
func TestSchemaRefusesBadValues(t *testing.T) {
	ch := loadChart(t)
	cases := []struct {
		name   string
		values map[string]any
		want   string // a fragment of the error
	}{
		{"kernel device name", map[string]any{"node": map[string]any{"originDevices": []any{"/dev/sdb"}}}, "originDevices"},
		{"cache device outside by-id", map[string]any{"node": map[string]any{"cacheDevices": []any{"/dev/disk/by-path/pci-0000:01:00.0-nvme-1"}}}, "cacheDevices"},
		{"unknown cache mode", map[string]any{"storageClass": map[string]any{"cacheMode": "writeback"}}, "cacheMode"},
		{"bad cache size", map[string]any{"storageClass": map[string]any{"cacheSize": "ten gigs"}}, "cacheSize"},
		{"unknown filesystem", map[string]any{"storageClass": map[string]any{"fsType": "btrfs"}}, "fsType"},
		{"unknown log format", map[string]any{"logging": map[string]any{"format": "logfmt"}}, "format"},
		{"bad alert wait", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"for": "15 minutes"}}}, "for"},
		{"misspelt key", map[string]any{"node": map[string]any{"cacheDevice": []any{}}}, "cacheDevice"},
		{"bad duration", map[string]any{"node": map[string]any{"healthInterval": "1 second"}}, "healthInterval"},
		{"report ConfigMap name", map[string]any{"bench": map[string]any{"reportConfigMap": "Bench_Report"}}, "reportConfigMap"},
		{"group without selector", map[string]any{"node": map[string]any{"nodeGroups": []any{map[string]any{"name": "a"}}}}, "nodeSelector"},
		{"group with an empty selector", map[string]any{"node": map[string]any{"nodeGroups": []any{map[string]any{"name": "a", "nodeSelector": map[string]any{}}}}}, "nodeSelector"},
		{"selector outside by-id", map[string]any{"node": map[string]any{"originSelector": map[string]any{"byId": "/dev/sd*"}}}, "byId"},
		{"unknown selector key", map[string]any{"node": map[string]any{"cacheSelector": map[string]any{"serial": "S1"}}}, "serial"},
		{"selector size", map[string]any{"node": map[string]any{"originSelector": map[string]any{"minSize": "two terabytes"}}}, "minSize"},
		{"selector rotational", map[string]any{"node": map[string]any{"originSelector": map[string]any{"rotational": "yes"}}}, "rotational"},
		{"group selector", map[string]any{"node": map[string]any{"nodeGroups": []any{map[string]any{"name": "a", "nodeSelector": map[string]any{"a": "b"},
			"cacheSelector": map[string]any{"model": "a,b"}}}}}, "model"},
		{"toleration operator", map[string]any{"node": map[string]any{"tolerations": []any{map[string]any{"operator": "Always"}}}}, "operator"},
		{"retry interval", map[string]any{"node": map[string]any{"poolRetryInterval": "soon"}}, "poolRetryInterval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderValues(ch, c.values)
			if err == nil {
				t.Fatalf("values %v were accepted", c.values)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error does not name %q: %v", c.want, err)
			}
		})
	}
}

// TestEveryValueIsDocumented: each key of values.yaml has a comment line just
// above it, or opens a block whose first line is a comment. The children of a
// value documented with "# --" (such as a resources map) are its content.
func TestEveryValueIsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`^(\s*)([A-Za-z][A-Za-z0-9_.-]*):`)
	lines := strings.Split(string(data), "\n")
	contentIndent := -1 // lines indented deeper than this belong to a documented value
	for i, line := range lines {
		m := key.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		indent := len(m[1])
		if contentIndent >= 0 && indent > contentIndent {
			continue
		}
		contentIndent = -1
		above := ""
		if i > 0 {
			above = strings.TrimSpace(lines[i-1])
		}
		switch {
		case strings.HasPrefix(above, "# --"):
			if strings.HasSuffix(strings.TrimSpace(line), ":") {
				contentIndent = indent
			}
		case strings.HasPrefix(above, "#") || isBlockStart(lines, i):
		default:
			t.Errorf("values.yaml:%d: %q has no comment above it", i+1, m[2])
		}
	}
}

// isBlockStart accepts a key that opens a block of keys whose first line is a
// comment, like `image:` followed by documented keys.
func isBlockStart(lines []string, i int) bool {
	return strings.HasSuffix(strings.TrimSpace(lines[i]), ":") && i+1 < len(lines) &&
		strings.HasPrefix(strings.TrimSpace(lines[i+1]), "#")
}

// TestChartCRDsAreTheGeneratedOnes: hack/generate.sh copies deploy/crd into the chart.
func TestChartCRDsAreTheGeneratedOnes(t *testing.T) {
	generated, err := filepath.Glob("../../deploy/crd/*.yaml")
	if err != nil || len(generated) == 0 {
		t.Fatalf("no CRDs in deploy/crd: %v", err)
	}
	inChart, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if len(inChart) != len(generated) {
		t.Fatalf("chart has %d CRD files, deploy/crd %d: run hack/generate.sh", len(inChart), len(generated))
	}
	for _, g := range generated {
		want, _ := os.ReadFile(g)
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(g)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("charts/ssdcache/crds/%s differs from %s: run hack/generate.sh", filepath.Base(g), g)
		}
	}
}
